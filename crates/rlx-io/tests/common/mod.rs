//! The bounded fuzz run the format tests share.

/// Every truncation of each seed, then 20,000 copies with 1-3 bytes edited (a random
/// byte, one of `alphabet`, or the top bit flipped) among the first `window` bytes:
/// `check` sees each one and must not panic.
pub fn mutations(seeds: &[Vec<u8>], alphabet: &[u8], window: usize, mut check: impl FnMut(&[u8])) {
    for seed in seeds {
        for cut in 0..seed.len() {
            check(&seed[..cut]);
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..20_000 {
        let mut file = seeds[i % seeds.len()].clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % (file.len().min(window) as u64)) as usize;
            file[at] = match next() % 3 {
                0 => next() as u8,
                1 => alphabet[(next() % alphabet.len() as u64) as usize],
                _ => file[at] ^ 0x80,
            };
        }
        check(&file);
    }
}
