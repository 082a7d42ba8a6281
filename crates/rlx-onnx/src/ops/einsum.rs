//! Einsum, lowered to the IR's layout ops, sums and batched matmuls.
//!
//! Each operand first takes the diagonal of a label it repeats (a gather on the
//! flattened pair of axes) and sums out the labels no one else needs; the operands are
//! then contracted left to right, each pair as one matmul `[batch, m, k] x [batch, k, n]`
//! over the labels they share (batch if needed later, contracted otherwise), and the last
//! result is transposed to the output's label order. Labels are letters; `...` stands for
//! the leading dims an operand has beyond its letters, right-aligned across operands
//! (NumPy broadcasting, a size-1 dim expanded to the others').

use super::{OpDef, def, one};
use crate::import::{Importer, Node};
use crate::ops::elementwise::identity_of;
use crate::ops::layout::take;
use rlx_ir::shape::numel;
use rlx_ir::{Error, NodeId, ReduceOp, Result};
use std::collections::BTreeMap;

pub const OPS: &[OpDef] = &[def("Einsum", 12, einsum)];

type Sizes = BTreeMap<Label, usize>;

/// A label: a letter, or the `j`-th dim from the right of the ellipsis.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Label {
    Letter(char),
    Ellipsis(usize),
}

/// One term's labels, with `...` expanded to `ellipsis` dims (rank minus its letters).
fn parse_term(term: &str, rank: Option<usize>, max_ellipsis: usize) -> Result<Vec<Label>> {
    let (head, tail, has_dots) = match term.split_once("...") {
        Some((h, t)) => (h, t, true),
        None => (term, "", false),
    };
    let letters = |s: &str| -> Result<Vec<Label>> {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(Label::Letter(c))
                } else {
                    Err(Error::parse(format!("einsum term '{term}' has '{c}', not a letter")))
                }
            })
            .collect()
    };
    let (h, t) = (letters(head)?, letters(tail)?);
    let named = h.len() + t.len();
    let dots = match (has_dots, rank) {
        (false, Some(r)) if r != named => {
            return Err(Error::shape(format!("einsum term '{term}' names {named} axes of a rank-{r} operand")));
        }
        (false, _) => 0,
        (true, Some(r)) => r.checked_sub(named).ok_or_else(|| {
            Error::shape(format!("einsum term '{term}' names more axes than the rank-{r} operand has"))
        })?,
        (true, None) => max_ellipsis,
    };
    Ok(h.into_iter().chain((0..dots).rev().map(Label::Ellipsis)).chain(t).collect())
}

struct Operand {
    id: NodeId,
    labels: Vec<Label>,
}

fn einsum(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let eq: String = n.string("equation", "")?.chars().filter(|c| !c.is_whitespace()).collect();
    let xs = i.inputs(n)?;
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != xs.len() {
        return Err(Error::shape(format!("equation '{eq}' has {} operands, the node {}", terms.len(), xs.len())));
    }
    let mut ops = Vec::with_capacity(xs.len());
    for (&t, &x) in terms.iter().zip(&xs) {
        let labels = parse_term(t, Some(i.g.dims(x).len()), 0)?;
        ops.push(Operand { id: x, labels });
    }
    let max_ellipsis =
        ops.iter().map(|o| o.labels.iter().filter(|l| matches!(l, Label::Ellipsis(_))).count()).max().unwrap_or(0);
    let out: Vec<Label> = match rhs {
        Some(r) => parse_term(r, None, max_ellipsis)?,
        None => {
            // Implicit: the ellipsis dims, then the letters used once, alphabetically.
            let mut once: Vec<Label> = Vec::new();
            let all: Vec<Label> = ops.iter().flat_map(|o| o.labels.iter().copied()).collect();
            for &l in &all {
                if matches!(l, Label::Letter(_)) && all.iter().filter(|&&m| m == l).count() == 1 {
                    once.push(l);
                }
            }
            once.sort();
            (0..max_ellipsis).rev().map(Label::Ellipsis).chain(once).collect()
        }
    };
    // The size of each label: the largest over the operands (a 1 broadcasts).
    let mut size = Sizes::new();
    for o in &ops {
        for (k, &l) in o.labels.iter().enumerate() {
            let d = i.g.dims(o.id)[k];
            let s = size.entry(l).or_insert(d);
            if *s != d && *s != 1 && d != 1 {
                return Err(Error::shape(format!("einsum label {l:?} has sizes {s} and {d}")));
            }
            *s = (*s).max(d);
        }
    }
    if let Some(l) = out.iter().find(|l| !size.contains_key(l)) {
        return Err(Error::shape(format!("einsum output label {l:?} is in no operand")));
    }
    for k in 0..ops.len() {
        let needed: Vec<Label> = out
            .iter()
            .chain(ops.iter().enumerate().filter(|&(j, _)| j != k).flat_map(|(_, o)| o.labels.iter()))
            .copied()
            .collect();
        let o = &ops[k];
        let (id, labels) = prepare(i, o.id, &o.labels, &needed, &size)?;
        ops[k] = Operand { id, labels };
    }
    let mut ops = ops.into_iter();
    let Some(mut acc) = ops.next() else { return Err(Error::graph("Einsum needs an operand")) };
    let rest: Vec<Operand> = ops.collect();
    for (k, b) in rest.iter().enumerate() {
        let later: Vec<Label> = out.iter().chain(rest[k + 1..].iter().flat_map(|o| o.labels.iter())).copied().collect();
        acc = contract(i, &acc, b, &later, &size)?;
    }
    // Only output labels are left; put them in order.
    let perm: Vec<usize> = out
        .iter()
        .map(|l| {
            acc.labels.iter().position(|m| m == l).ok_or_else(|| Error::internal(format!("einsum lost label {l:?}")))
        })
        .collect::<Result<_>>()?;
    let y = if perm.iter().enumerate().all(|(k, &p)| k == p) { acc.id } else { i.g.transpose(acc.id, &perm)? };
    one(if xs.contains(&y) { identity_of(i, y)? } else { y })
}

/// One operand with its repeated labels reduced to diagonals, its size-1 broadcast dims
/// expanded, and the labels outside `needed` summed out.
fn prepare(
    i: &mut Importer,
    mut x: NodeId,
    labels: &[Label],
    needed: &[Label],
    size: &Sizes,
) -> Result<(NodeId, Vec<Label>)> {
    let mut labels = labels.to_vec();
    // Diagonals: move a repeated pair last, flatten it, take entries k (n + 1).
    while let Some((p, q)) =
        (0..labels.len()).find_map(|p| (p + 1..labels.len()).find(|&q| labels[q] == labels[p]).map(|q| (p, q)))
    {
        let d = i.g.dims(x).to_vec();
        let r = d.len();
        if d[p] != d[q] {
            return Err(Error::shape(format!("einsum repeats label {:?} over dims {} and {}", labels[p], d[p], d[q])));
        }
        let perm: Vec<usize> = (0..r).filter(|&k| k != p && k != q).chain([p, q]).collect();
        let t = i.g.transpose(x, &perm)?;
        let m = d[p];
        let flat: Vec<usize> = perm[..r - 2].iter().map(|&k| d[k]).chain([m * m]).collect();
        let t = i.g.reshape(t, &flat)?;
        let diag: Vec<usize> = (0..m).map(|k| k * (m + 1)).collect();
        x = if m == 0 { i.g.narrow(t, r - 2, 0, 0)? } else { take(i, t, r - 2, &diag)? };
        let l = labels[p];
        labels = perm[..r - 2].iter().map(|&k| labels[k]).chain([l]).collect();
    }
    let want: Vec<usize> = labels.iter().map(|l| size.get(l).copied().unwrap_or(1)).collect();
    x = i.g.broadcast_to(x, &want)?;
    let drop: Vec<usize> = (0..labels.len()).filter(|&k| !needed.contains(&labels[k])).collect();
    if !drop.is_empty() {
        x = i.g.reduce(ReduceOp::Sum, x, &drop, false)?;
        labels = (0..labels.len()).filter(|k| !drop.contains(k)).map(|k| labels[k]).collect();
    }
    Ok((x, labels))
}

/// `a` and `b` contracted over the labels they share that `later` does not need, as one
/// batched matmul; result labels: shared kept (batch), a's own, b's own.
fn contract(i: &mut Importer, a: &Operand, b: &Operand, later: &[Label], size: &Sizes) -> Result<Operand> {
    let shared = |l: &Label| b.labels.contains(l);
    let batch: Vec<Label> = a.labels.iter().filter(|l| shared(l) && later.contains(l)).copied().collect();
    let inner: Vec<Label> = a.labels.iter().filter(|l| shared(l) && !later.contains(l)).copied().collect();
    let a_own: Vec<Label> = a.labels.iter().filter(|l| !shared(l)).copied().collect();
    let b_own: Vec<Label> = b.labels.iter().filter(|l| !a.labels.contains(l)).copied().collect();
    let dims = |ls: &[Label]| -> Vec<usize> { ls.iter().map(|l| size.get(l).copied().unwrap_or(1)).collect() };
    let arrange = |i: &mut Importer, o: &Operand, order: &[Label], shape: &[usize]| -> Result<NodeId> {
        let perm: Vec<usize> = order.iter().filter_map(|l| o.labels.iter().position(|m| m == l)).collect();
        let t = if perm.iter().enumerate().all(|(k, &p)| k == p) { o.id } else { i.g.transpose(o.id, &perm)? };
        i.g.reshape(t, shape)
    };
    let (nb, nm, nk, nn) = (numel(&dims(&batch)), numel(&dims(&a_own)), numel(&dims(&inner)), numel(&dims(&b_own)));
    let x = arrange(i, a, &[batch.clone(), a_own.clone(), inner.clone()].concat(), &[nb, nm, nk])?;
    let y = arrange(i, b, &[batch.clone(), inner, b_own.clone()].concat(), &[nb, nk, nn])?;
    let z = i.g.matmul(x, y)?;
    let labels: Vec<Label> = [batch, a_own, b_own].concat();
    let id = i.g.reshape(z, &dims(&labels))?;
    Ok(Operand { id, labels })
}
