//! The container helper of wisp's runtime on its own, for this crate's tests and for
//! embedders without wisp's binary (which is the helper of `wisp serve`): `container-init
//! <bundle>` and `container-exec <bundle> <argv…>` (see `container/native`).

use std::process::ExitCode;

fn main() -> ExitCode {
    wisp_runtime::container::helper_main().unwrap_or_else(|| {
        eprintln!(
            "usage: wisp-container-init {} <bundle> | {} <bundle> <command…>",
            wisp_runtime::container::INIT_COMMAND,
            wisp_runtime::container::EXEC_COMMAND
        );
        ExitCode::from(2)
    })
}
