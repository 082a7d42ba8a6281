//! Helpers shared by the tests that read files from the model cache.

use std::path::PathBuf;

/// `name` in the model cache, or `None` (with a note saying how to fetch it) when it is
/// absent and `RLX_REQUIRE_MODEL=1` is not set (CI sets it: there a missing file fails).
pub fn cached(name: &str, fetch: &str) -> Option<PathBuf> {
    let path = rlx_models::models_dir().join(name);
    if path.exists() {
        return Some(path);
    }
    let msg = format!("{} is missing: run {fetch}", path.display());
    assert!(std::env::var("RLX_REQUIRE_MODEL").map_or(true, |v| v != "1"), "{msg}");
    eprintln!("skipping: {msg}");
    None
}
