//! The memory plan: every value of a schedule gets a byte range in ONE arena.
//!
//! Values are grouped into storages: a view (reshape, a contiguous narrow) shares its
//! source's storage at an offset, and an in-place step's output takes over the storage of
//! an input that dies there. Each storage is live from the step that first writes it to
//! the last step that reads any of its values (graph outputs: to the end; params and
//! constants: always). Storages are placed greedily, largest first, at the lowest
//! 64-byte-aligned offset that overlaps no storage live at the same time.
//! `check_plan` re-derives liveness from the schedule and proves no two live values
//! overlap.
//!
//! A target may keep params outside the arena (`Target::params_outside_arena`, the CPU
//! does): each param is then its own buffer, which the runtime can fill once, share
//! between programs or map straight from a file, and a `kv_append` that is the only reader
//! of a param cache writes into that buffer in place. The cache is then state that
//! persists across runs (how a decode step keeps its KV cache without copying it).

use crate::schedule::{Kernel, Schedule, ValueId, ValueKind};
use rlx_ir::shape::numel;
use rlx_ir::{DType, Error, Op, Result};

/// Arena offsets are multiples of this (a cache line, and AVX-512's vector width).
pub const ALIGN: usize = 64;

/// How many bytes each element of a tensor takes in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArenaWidthPolicy {
    /// Every f16/bf16 tensor widened to f32 (4 bytes); everything else native.
    F32Uniform,
    /// Every tensor in its declared dtype (f16/bf16 packed, 2 bytes).
    Native,
    /// f16/bf16 params stay packed (2 bytes) when every step reading them takes a packed
    /// operand there (the target says which: `Target::packed_operand`); every other
    /// f16/bf16 value (inputs, constants, intermediates, params with another reader) is
    /// widened to f32. Integers are native. A boundary tensor thus keeps its 2-byte form
    /// only when all its consumers read that form.
    NativeHalfWidened,
    /// Every element of fewer than 4 bytes (f16, bf16, i8, u8, bool) stored in a 4-byte
    /// word (f16/bf16 as f32, integers and bool as i32), except params every reader takes
    /// packed (quantized weight bytes); 8-byte types native. For targets whose shading
    /// languages have no 8- or 16-bit storage types (WGSL's core has 32-bit words only).
    Words32,
}

impl ArenaWidthPolicy {
    pub fn name(self) -> &'static str {
        match self {
            ArenaWidthPolicy::F32Uniform => "F32Uniform",
            ArenaWidthPolicy::Native => "Native",
            ArenaWidthPolicy::NativeHalfWidened => "NativeHalfWidened",
            ArenaWidthPolicy::Words32 => "Words32",
        }
    }

    /// Bytes per element of a value of `dtype` under this policy; `packed_state` says the
    /// value is a param (or a KV cache's in-place append to one) that every reader takes
    /// packed.
    pub fn elem_bytes(self, dtype: DType, packed_state: bool) -> usize {
        let packed_param = packed_state;
        let widen = match self {
            ArenaWidthPolicy::F32Uniform => dtype.is_half(),
            ArenaWidthPolicy::Native => false,
            ArenaWidthPolicy::NativeHalfWidened => dtype.is_half() && !packed_param,
            ArenaWidthPolicy::Words32 => dtype.size_bytes() < 4 && !packed_param,
        };
        if widen { 4 } else { dtype.size_bytes() }
    }
}

/// Whether a target's kernel reads operand `k` packed: 2-byte f16/bf16, or under
/// `Words32` any sub-word type (quantized weight bytes).
pub type PackedOperand = fn(&Kernel, usize) -> bool;

/// A value's bytes: in the arena, or in the buffer of param `param`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub offset: usize,
    pub bytes: usize,
    /// Bytes per element (the width policy's answer for this value).
    pub elem_bytes: usize,
    /// The param (index in `Schedule::params`) whose own buffer holds the value; `None`
    /// for the arena.
    pub param: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct MemoryPlan {
    pub policy: ArenaWidthPolicy,
    /// Per value; `None` for values no step writes or reads (absorbed by fusion).
    pub slots: Vec<Option<Slot>>,
    /// Bytes the arena needs.
    pub arena_bytes: usize,
    /// Per param (in `Schedule::params` order), the bytes of its own buffer when params
    /// live outside the arena; empty otherwise.
    pub param_bytes: Vec<usize>,
    /// Bytes every storage would take side by side (the plan without reuse).
    pub unshared_bytes: usize,
    /// Steps that run as views: no kernel, the output aliases the input.
    pub views: Vec<bool>,
    /// (step, input value) pairs whose output overwrites that input in place.
    pub in_place: Vec<(usize, ValueId)>,
    /// Per value, the storage it lives in (values of one storage may overlap).
    pub storage: Vec<usize>,
}

/// Live interval of a value or storage: from its first write to its last read, in steps.
/// -1 is "before the first step" (inputs); `i64::MAX` is "never dies" (params, constants).
type Interval = (i64, i64);

fn overlaps(a: Interval, b: Interval) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Per value, its live interval (None if the value is never materialized).
pub fn value_intervals(s: &Schedule) -> Vec<Option<Interval>> {
    let end = s.steps.len() as i64;
    let mut iv: Vec<Option<Interval>> = s
        .values
        .iter()
        .map(|v| match v.kind {
            ValueKind::Param { .. } | ValueKind::Constant(_) => Some((-1, i64::MAX)),
            ValueKind::Input { .. } => Some((-1, -1)),
            ValueKind::Intermediate => None,
        })
        .collect();
    for (i, step) in s.steps.iter().enumerate() {
        let i = i as i64;
        for &v in step.outputs.iter().chain(&step.temps) {
            iv[v] = Some((i, i));
        }
        for &v in &step.inputs {
            if let Some((a, b)) = iv[v] {
                iv[v] = Some((a, b.max(i)));
            }
        }
    }
    for &o in &s.outputs {
        if let Some((a, b)) = iv[o] {
            iv[o] = Some((a, b.max(end)));
        }
    }
    iv
}

/// Whether `step` may run as a view of its input, and at which element offset.
fn view_offset(s: &Schedule, step: usize) -> Option<usize> {
    let st = &s.steps[step];
    let Kernel::Op(op) = &st.kernel else { return None };
    let src = &s.values[st.inputs[0]].dims;
    match op {
        Op::Reshape { .. } => Some(0),
        // Contiguous when every axis before `axis` has extent 1.
        Op::Narrow { axis, start, .. } if src[..*axis].iter().all(|&d| d == 1) => Some(start * numel(&src[axis + 1..])),
        _ => None,
    }
}

/// Whether `step` may write its output over input `k`'s bytes.
fn in_place_operand(s: &Schedule, step: usize) -> Vec<usize> {
    match &s.steps[step].kernel {
        Kernel::Region(_) => (0..s.steps[step].inputs.len()).collect(),
        Kernel::Op(Op::KvAppend { .. }) => vec![0],
        _ => Vec::new(),
    }
}

pub fn plan_memory(
    s: &Schedule,
    (policy, packed_operand): (ArenaWidthPolicy, PackedOperand),
    reuse: bool,
    params_outside: bool,
) -> Result<MemoryPlan> {
    let n = s.values.len();
    let iv = value_intervals(s);
    // Values every reader takes packed (graph outputs are read by the boundary, which
    // takes what the arena holds, but keep them simple: widened).
    let mut take_packed: Vec<bool> = (0..n).map(|v| !s.is_output(v)).collect();
    for step in &s.steps {
        for (k, &v) in step.inputs.iter().enumerate() {
            take_packed[v] &= packed_operand(&step.kernel, k);
        }
    }
    // A KV cache appended in place stays packed through the append: its output is the
    // param's own bytes, read by packed-operand kernels.
    let mut appended = vec![false; n];
    for step in &s.steps {
        if matches!(step.kernel, Kernel::Op(Op::KvAppend { .. })) {
            appended[step.outputs[0]] = matches!(s.values[step.inputs[0]].kind, ValueKind::Param { .. });
        }
    }
    let elem = |v: ValueId| {
        let state = appended[v] || matches!(s.values[v].kind, ValueKind::Param { .. });
        policy.elem_bytes(s.values[v].dtype, state && take_packed[v])
    };
    let bytes = |v: ValueId| numel(&s.values[v].dims) * elem(v);
    let is_param = |v: ValueId| matches!(s.values[v].kind, ValueKind::Param { .. });
    let mut readers = vec![0usize; n];
    for step in &s.steps {
        for &v in &step.inputs {
            readers[v] += 1;
        }
    }

    // Storages: each materialized value starts as its own; views and in-place join them.
    let mut storage: Vec<usize> = (0..n).collect();
    let mut offset_in_storage = vec![0usize; n];
    let mut views = vec![false; s.steps.len()];
    let mut in_place = Vec::new();
    let mut storage_iv: Vec<Option<Interval>> = iv.clone();
    let root = |storage: &[usize], mut v: usize| {
        while storage[v] != v {
            v = storage[v];
        }
        v
    };
    for (i, step) in s.steps.iter().enumerate() {
        if reuse
            && let Some(elems) = view_offset(s, i)
            && elem(step.inputs[0]) == elem(step.outputs[0])
        {
            let (src, out) = (step.inputs[0], step.outputs[0]);
            let r = root(&storage, src);
            storage[out] = r;
            offset_in_storage[out] = offset_in_storage[src] + elems * elem(src);
            views[i] = true;
            // The storage now lives as long as the view does.
            if let (Some(a), Some(b)) = (storage_iv[r], iv[out]) {
                storage_iv[r] = Some((a.0.min(b.0), a.1.max(b.1)));
            }
            continue;
        }
        let out = step.outputs[0];
        for k in in_place_operand(s, i) {
            let v = step.inputs[k];
            let r = root(&storage, v);
            let ends_here = storage_iv[r].is_some_and(|(_, end)| end == i as i64);
            let whole =
                offset_in_storage[v] == 0 && bytes(v) == bytes(r) && storage.iter().filter(|&&x| x == r).count() == 1;
            let fits = bytes(v) == bytes(out) && elem(v) == elem(out) && s.values[v].dims == s.values[out].dims;
            let dead_here = matches!(s.values[v].kind, ValueKind::Intermediate) && ends_here;
            // A param cache read by this kv_append alone: the append is its state update.
            let param_state = params_outside
                && is_param(v)
                && matches!(&step.kernel, Kernel::Op(Op::KvAppend { .. }))
                && readers[v] == 1;
            // Reusing a dead input is an optimization (off without `reuse`); updating a
            // param cache in place is what makes it state, so it happens regardless.
            if ((reuse && dead_here) || param_state) && whole && fits && !s.is_output(v) {
                storage[out] = r;
                if let (Some(a), Some(b)) = (storage_iv[r], iv[out]) {
                    storage_iv[r] = Some((a.0.min(b.0), a.1.max(b.1)));
                }
                in_place.push((i, v));
                break;
            }
        }
    }
    let roots: Vec<usize> = (0..n).map(|v| root(&storage, v)).collect();

    // Bytes a storage spans: its root value's bytes (views never extend past their source).
    let outside = |r: usize| params_outside && is_param(r);
    let mut order: Vec<usize> = (0..n).filter(|&r| roots[r] == r && iv[r].is_some() && !outside(r)).collect();
    // Sizes are checked: each value's bytes fit a usize (the IR checks), their aligned
    // sum may not (`rlx check` printed a wrapped total of 0 for such a graph).
    let too_big =
        |r: usize| Error::runtime(format!("the memory plan overflows the address space at {}", s.describe(r)));
    let aligned = |r: usize| bytes(r).checked_next_multiple_of(ALIGN).ok_or_else(|| too_big(r));
    let mut unshared_bytes = 0usize;
    for &r in &order {
        unshared_bytes = unshared_bytes.checked_add(aligned(r)?).ok_or_else(|| too_big(r))?;
    }
    let persistent = |v: usize| matches!(s.values[v].kind, ValueKind::Param { .. } | ValueKind::Constant(_));
    // Persistent storages first (they are set once and must survive every run), then by
    // size, largest first.
    order.sort_by_key(|&r| (!persistent(r), std::cmp::Reverse(bytes(r)), r));
    let mut placed: Vec<(usize, usize, Interval)> = Vec::new(); // (offset, bytes, interval)
    let mut storage_offset = vec![0usize; n];
    let mut arena_bytes = 0usize;
    for &r in &order {
        let size = aligned(r)?;
        let life = storage_iv[r].unwrap_or((-1, i64::MAX));
        let offset = if reuse {
            let mut busy: Vec<(usize, usize)> =
                placed.iter().filter(|(_, _, l)| overlaps(*l, life)).map(|&(o, b, _)| (o, o + b)).collect();
            busy.sort_unstable();
            let mut at = 0usize;
            for (start, end) in busy {
                if at.saturating_add(size) <= start {
                    break;
                }
                at = at.max(end);
            }
            at
        } else {
            arena_bytes
        };
        storage_offset[r] = offset;
        placed.push((offset, size, life));
        arena_bytes = arena_bytes.max(offset.checked_add(size).ok_or_else(|| too_big(r))?);
    }
    let param_index = |r: usize| s.params.iter().position(|&p| p == r);
    let slots = (0..n)
        .map(|v| {
            iv[v]?;
            let r = roots[v];
            let (param, base) = if outside(r) { (param_index(r), 0) } else { (None, storage_offset[r]) };
            Some(Slot { offset: base + offset_in_storage[v], bytes: bytes(v), elem_bytes: elem(v), param })
        })
        .collect();
    let param_bytes = if params_outside {
        s.params.iter().map(|&p| if iv[p].is_some() && roots[p] == p { bytes(p) } else { 0 }).collect()
    } else {
        Vec::new()
    };
    let plan = MemoryPlan { policy, slots, arena_bytes, param_bytes, unshared_bytes, views, in_place, storage: roots };
    check_plan(s, &plan)?;
    Ok(plan)
}

/// Proves the plan safe: every materialized value lies inside the arena, and two values
/// live at the same time overlap only when they share a storage (a view or an in-place
/// step, which the planner created on purpose).
pub fn check_plan(s: &Schedule, plan: &MemoryPlan) -> Result<()> {
    let iv = value_intervals(s);
    let live: Vec<(ValueId, Interval, Slot)> =
        (0..s.values.len()).filter_map(|v| Some((v, iv[v]?, plan.slots[v]?))).collect();
    for &(v, _, slot) in &live {
        let (end, place) = match slot.param {
            None => (plan.arena_bytes, "the arena"),
            Some(p) => (plan.param_bytes.get(p).copied().unwrap_or(0), "its param buffer"),
        };
        if slot.offset + slot.bytes > end {
            return Err(Error::internal(format!("plan: {} ends past {place}", s.describe(v))));
        }
    }
    // Values sharing a storage (views, in-place steps) read it at one width: a packed
    // value and a widened one never alias.
    for &(v, _, slot) in &live {
        let r = plan.storage[v];
        if let Some(root) = plan.slots[r]
            && root.elem_bytes != slot.elem_bytes
        {
            return Err(Error::internal(format!(
                "plan: {} ({} bytes per element) shares the storage of {} ({})",
                s.describe(v),
                slot.elem_bytes,
                s.describe(r),
                root.elem_bytes
            )));
        }
    }
    // A param written in place is read by the writing step alone, once (one read in all,
    // the writing step's): anything else reading it would see the update mid-run. Reads
    // counted in one pass over the steps (a pass per param made a 64-row batched decode
    // graph's check ~0.4 s: 3840 caches).
    let mut reads = vec![0usize; s.values.len()];
    for &v in s.steps.iter().flat_map(|st| &st.inputs) {
        reads[v] += 1;
    }
    for &(step, v) in &plan.in_place {
        if matches!(s.values[v].kind, ValueKind::Param { .. }) && (reads[v] != 1 || !s.steps[step].inputs.contains(&v))
        {
            return Err(Error::internal(format!("plan: {} is updated in place but has other readers", s.describe(v))));
        }
    }
    // Param buffers hold one storage each (the param, its views, its in-place cache).
    let mut by_start: Vec<&(ValueId, Interval, Slot)> =
        live.iter().filter(|(_, _, slot)| slot.param.is_none()).collect();
    by_start.sort_by_key(|(_, _, slot)| slot.offset);
    for (i, &&(a, ia, sa)) in by_start.iter().enumerate() {
        for &&(b, ib, sb) in &by_start[i + 1..] {
            if sb.offset >= sa.offset + sa.bytes {
                break; // sorted by offset: no later value overlaps `a`
            }
            if sa.bytes == 0 || sb.bytes == 0 || plan.storage[a] == plan.storage[b] || !overlaps(ia, ib) {
                continue;
            }
            return Err(Error::internal(format!(
                "plan: {} and {} are live together and overlap in the arena",
                s.describe(a),
                s.describe(b)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Graph;

    /// A cache param appended in place passes the check; a second reader of it (which
    /// would see the update mid-run) fails it, naming the param.
    #[test]
    fn a_param_updated_in_place_has_one_reader() {
        let mut g = Graph::new("append");
        let cache = g.param("cache", DType::F32, &[1, 1, 4, 2]).unwrap();
        let row = g.input("row", DType::F32, &[1, 1, 1, 2]).unwrap();
        let pos = g.input("pos", DType::I32, &[1]).unwrap();
        let appended = g.kv_append(cache, row, pos, 2).unwrap();
        g.set_outputs(&[appended]).unwrap();
        let mut s = Schedule::lower(&g).unwrap();
        let plan = plan_memory(&s, (ArenaWidthPolicy::Native, |_, _| false), true, true).unwrap();
        let cache_value = s.params[0];
        assert!(plan.in_place.iter().any(|&(_, v)| v == cache_value), "the append is in place");
        check_plan(&s, &plan).unwrap();
        // Another step reading the cache.
        let mut reader = s.steps[0].clone();
        reader.outputs = vec![s.steps[0].outputs[0]];
        s.steps.insert(0, reader);
        let shifted = MemoryPlan { in_place: plan.in_place.iter().map(|&(st, v)| (st + 1, v)).collect(), ..plan };
        let e = check_plan(&s, &shifted).unwrap_err();
        assert!(e.to_string().contains("other readers") && e.to_string().contains("cache"), "{e}");
    }
}
