//! Shared by the integration tests that replay real tc.

use std::sync::Arc;

use qdisc::tc::{ReadFile, TcLib};

/// tc's library directory as the captures and tdc runs had it (`TC_LIB_DIR`:
/// iproute2 6.15's own distribution tables, unpacked by scripts/install-iproute2.sh),
/// read from the file system.
pub fn tc_lib() -> TcLib {
    let cache = std::env::var("QDL_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/qdisc-lab", std::env::var("HOME").unwrap_or_default()));
    let read: ReadFile = Arc::new(|p: &str| std::fs::read(p));
    TcLib { dir: format!("{cache}/iproute2-6.15/usr/lib/x86_64-linux-gnu/tc"), read: Some(read) }
}
