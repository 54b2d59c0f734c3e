//! The `wisp` binary (being written).
mod serve;
fn main() {
    let _ = serve::run;
}
