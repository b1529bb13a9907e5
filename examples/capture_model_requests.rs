//! Serves the scripted model on loopback and, when stdin closes, writes every request it received
//! to a directory: how the real-client fixtures under `tests/fixtures/model-requests/` were made (a
//! real CLI pointed at the printed base URL). Credentials are not written: only the names of the
//! headers that carried them.
//!
//! `cargo run --example capture_model_requests -- OUT_DIR` prints `http://127.0.0.1:PORT`, then
//! serves until stdin reaches its end.

use std::io::Read as _;

use serde_json::json;
use stet_scripted_model::ScriptedModel;

/// Headers whose values are credentials: recorded by name only.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "cookie", "chatgpt-account-id"];

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .ok_or("usage: capture_model_requests OUT_DIR")?;
    std::fs::create_dir_all(&out)?;
    let model = ScriptedModel::serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    println!("http://{}", model.address());
    tokio::task::spawn_blocking(|| {
        let mut rest = Vec::new();
        std::io::stdin().read_to_end(&mut rest)
    })
    .await??;
    for (number, request) in model.requests().iter().enumerate() {
        let headers: Vec<_> = request
            .headers
            .iter()
            .map(|(name, value)| {
                if CREDENTIAL_HEADERS.contains(&name.as_str()) {
                    json!([name, "<credential withheld>"])
                } else {
                    json!([name, value])
                }
            })
            .collect();
        let record = json!({
            "path": request.path,
            "headers": headers,
            "body": request.body,
        });
        let file = format!("{out}/{:02}.json", number + 1);
        std::fs::write(&file, serde_json::to_string_pretty(&record)? + "\n")?;
    }
    model.shutdown().await;
    Ok(())
}
