//! The API's view of the request log (`…/log?container=queue-proxy`): the data plane's
//! [`RequestLog`] as the apiserver's [`RequestLogs`].

use std::sync::Arc;

use futures_util::StreamExt as _;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use wisp_apiserver::logs::RequestLogs;
use wisp_queue::request_log::{Line, RequestLog};
use wisp_runtime::{LogLine, RevisionKey};

/// The adapter.
#[derive(Debug)]
pub struct Api(pub Arc<RequestLog>);

fn log_line(l: &Line) -> LogLine {
    LogLine {
        replica: l.replica.clone(),
        stream: "stdout",
        line: l.line.clone(),
        time: l.time,
        run: 0,
        // Not the platform's sequence: request-log lines are served on their own.
        seq: 0,
    }
}

impl RequestLogs for Api {
    fn lines(&self, key: &RevisionKey, tail: Option<usize>) -> Vec<LogLine> {
        self.0
            .lines(&key.namespace, &key.name, tail)
            .iter()
            .map(|l| log_line(l))
            .collect()
    }

    fn follow(
        &self,
        keys: &[RevisionKey],
    ) -> futures_util::stream::BoxStream<'static, Result<LogLine, u64>> {
        let keys: Vec<RevisionKey> = keys.to_vec();
        BroadcastStream::new(self.0.follow())
            .filter_map(move |r| {
                let out = match r {
                    Ok(l) => keys
                        .iter()
                        .any(|k| k.namespace == l.namespace && k.name == l.revision)
                        .then(|| Ok(log_line(&l))),
                    Err(BroadcastStreamRecvError::Lagged(n)) => Some(Err(n)),
                };
                std::future::ready(out)
            })
            .boxed()
    }
}
