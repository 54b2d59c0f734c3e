//! `hello`: answers every request with `Hello <TARGET>!` (Knative's helloworld sample).

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "World".to_string());
    let body = bytes::Bytes::from(format!("Hello {target}!\n"));
    wisp_samples::main_with(move |_req| {
        let body = body.clone();
        async move { wisp_samples::text(200, body) }
    });
}
