//! HTTP/1.1 Upgrade (websocket) tunnels.
//!
//! hyper hands each side of an accepted upgrade over as an `OnUpgrade` future: the
//! downstream one (from the server request) resolves once our `101` has been written to the
//! client, the upstream one (from the client response) once the replica's `101` was read.
//! The tunnel joins both and copies bytes both ways until either side closes.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::debug;

/// Spawns the task that joins the two upgraded connections.
pub(crate) fn spawn_tunnel(downstream: OnUpgrade, upstream: OnUpgrade) {
    tokio::spawn(async move {
        let (down, up) = match tokio::try_join!(downstream, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                debug!(error = %e, "upgrade failed");
                return;
            }
        };
        let mut down = TokioIo::new(down);
        let mut up = TokioIo::new(up);
        match tokio::io::copy_bidirectional(&mut down, &mut up).await {
            Ok((from_client, from_replica)) => {
                debug!(from_client, from_replica, "upgraded connection closed");
            }
            Err(e) => debug!(error = %e, "upgraded connection failed"),
        }
    });
}
