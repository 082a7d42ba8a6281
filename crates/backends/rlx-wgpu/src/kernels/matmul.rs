//! Batched matmul `[.., m, k] x [.., k, n]` with broadcast batch dims: 64 x 64 output
//! tiles per workgroup of 256 threads, each thread 4 x 4 outputs (rows `tr + 16 i`,
//! columns `tc + 16 j`, so neighbouring threads read neighbouring shared words), the
//! operands staged through shared memory 16 columns of k at a time. Accumulates in the
//! compute type (f32 for f32/f16/bf16, wrapping i32 / i64 for integers) and rounds once
//! on store, as the CPU's GEMMs do.

use super::{Call, Tensor, store_round, strides, u32s, within_loop_limit};

const TILE: usize = 64;
/// Loop iterations an invocation runs per 16-wide step of k, as lavapipe counts them: a
/// 1 x k by k x 2 product came out wrong from k = 61,000 (3,813 steps) and right at
/// 55,000 (3,438), so 18 per step (the k0 and kk loops; Mesa unrolls the 4-trip loops).
/// Counted as 25 for margin: k up to 38,400 runs here, longer on the host.
const TRIPS_PER_K_STEP: usize = 25;

pub fn matmul(a: &Tensor, b: &Tensor, out: &Tensor, int64: bool) -> Option<Call> {
    let (wa, wb, wo) = (a.compute_word(int64)?, b.compute_word(int64)?, out.compute_word(int64)?);
    let (ra, rb, ro) = (a.dims.len(), b.dims.len(), out.dims.len());
    let (m, k, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 1]);
    let batch_dims = &out.dims[..ro - 2];
    let batch: usize = batch_dims.iter().product();
    within_loop_limit(k.div_ceil(16).saturating_mul(TRIPS_PER_K_STEP) + ro + 32)?;
    // Per batch axis, each operand's matrix stride (0 where it is broadcast).
    let batch_strides = |t: &Tensor, r: usize| -> Vec<usize> {
        let own = strides(&t.dims[..r - 2]);
        let pad = batch_dims.len() - (r - 2);
        (0..batch_dims.len())
            .map(|d| if d < pad || t.dims[d - pad] == 1 { 0 } else { own[d - pad] * t.dims[r - 2] * t.dims[r - 1] })
            .collect()
    };
    let mut meta = u32s([m, n, k, batch_dims.len()]);
    meta.extend(u32s(batch_dims.iter().copied()));
    meta.extend(u32s(batch_strides(a, ra)));
    meta.extend(u32s(batch_strides(b, rb)));
    let ty = wo.wgsl();
    let store = store_round(out.dtype, "acc[i * 4u + j]");
    let body = format!(
        r#"var<workgroup> sa: array<{ty}, 1024>;
var<workgroup> sb: array<{ty}, 1024>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
    let m = mt[K];
    let n = mt[K + 1u];
    let k = mt[K + 2u];
    let br = mt[K + 3u];
    var rem = wg.z;
    var aoff = 0u;
    var boff = 0u;
    for (var d = 0u; d < br; d++) {{
        let ax = br - 1u - d;
        let dim = mt[K + 4u + ax];
        let c = rem % dim;
        rem = rem / dim;
        aoff += c * mt[K + 4u + br + ax];
        boff += c * mt[K + 4u + 2u * br + ax];
    }}
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let tr = li / 16u;
    let tc = li % 16u;
    var acc: array<{ty}, 16>;
    for (var k0 = 0u; k0 < k; k0 += 16u) {{
        for (var e = 0u; e < 4u; e++) {{
            let idx = li + e * 256u;
            let ar = row0 + idx / 16u;
            let ac = k0 + idx % 16u;
            var va = {ty}(0);
            if (ar < m && ac < k) {{ va = {ty}(t0[o0(aoff + ar * k + ac)]); }}
            sa[idx] = va;
            let bk = k0 + idx / 64u;
            let bc = col0 + idx % 64u;
            var vb = {ty}(0);
            if (bk < k && bc < n) {{ vb = {ty}(t1[o1(boff + bk * n + bc)]); }}
            sb[idx] = vb;
        }}
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {{
            var av: array<{ty}, 4>;
            for (var i = 0u; i < 4u; i++) {{ av[i] = sa[(tr + 16u * i) * 16u + kk]; }}
            for (var j = 0u; j < 4u; j++) {{
                let bv = sb[kk * 64u + tc + 16u * j];
                for (var i = 0u; i < 4u; i++) {{ acc[i * 4u + j] += av[i] * bv; }}
            }}
        }}
        workgroupBarrier();
    }}
    let ooff = wg.z * m * n;
    for (var i = 0u; i < 4u; i++) {{
        for (var j = 0u; j < 4u; j++) {{
            let r = row0 + tr + 16u * i;
            let c = col0 + tc + 16u * j;
            if (r < m && c < n) {{ t2[o2(ooff + r * n + c)] = {store}; }}
        }}
    }}
}}
"#
    );
    let groups = [n.div_ceil(TILE) as u32, m.div_ceil(TILE) as u32, batch as u32];
    Some(Call::groups(vec![(0, wa), (1, wb), (2, wo)], body, meta, groups))
}
