//! # wisp-net — the data plane's HTTP plumbing
//!
//! Everything the ingress, the activator and the queue-proxy share to move HTTP traffic:
//!
//! - [`serve`] ([`server`]): the front-door server. HTTP/1.1 and h2c (HTTP/2 prior knowledge)
//!   on one port, websocket upgrades, bounded connections, header read timeout, graceful
//!   shutdown.
//! - [`ReplicaConnector`] ([`connector`]): connections to one replica (an HTTP/1 pool or one
//!   shared h2c connection) and [`ReplicaConnector::forward`], which proxies a request with
//!   streaming bodies, trailers and websocket upgrades, and hands an unsent request back
//!   ([`ForwardError::Unreached`]) so the caller can try another replica.
//! - [`headers`]: the pure proxy header rules (hop-by-hop stripping, `X-Forwarded-*`,
//!   RFC 7239 `Forwarded`, internal Knative headers), table-tested. [`Hop`] picks the rules
//!   for the last hop (to the app) or a hop between wisp proxies.
//! - [`body`]: the one response body type of the data plane ([`Body`]) and its constructors.
//! - [`synthetic`]: every response the data plane makes up itself (400/404/502/503/504),
//!   from a typed reason ([`Synthetic`]), in one place.
//!
//! The crate knows nothing of revisions, breakers or routing: the queue-proxy, activator
//! and ingress crates build on it.
//!
//! Start reading at [`connector`] (the hot path), then [`server`]. Tests sit beside the code
//! and run against real sockets on 127.0.0.1 (fixtures in `testutil.rs`).

pub mod body;
pub mod connector;
pub mod headers;
pub mod server;
pub mod synthetic;
mod upgrade;

#[cfg(test)]
mod testutil;

pub use body::{Body, BoxError, boxed, empty, full, text_response};
pub use connector::{ForwardContext, ForwardError, Hop, Protocol, ReplicaConnector};
pub use server::{RuntimeThread, ServerOptions, serve};
pub use synthetic::Synthetic;
