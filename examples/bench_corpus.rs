//! Writes the sanitizer benchmark corpora to files, for `hyperfine` runs of `stet sanitize` and `rg`:
//! `cargo run --release --example bench_corpus -- <dir> [megabytes]`.

#[path = "../benches/support/corpus.rs"]
mod corpus;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "target/bench-corpus".into()));
    let megabytes: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(200);
    std::fs::create_dir_all(&dir)?;
    let size = megabytes * 1024 * 1024;
    std::fs::write(dir.join("clean.log"), corpus::generate(size, None, 1))?;
    std::fs::write(dir.join("dense.log"), corpus::generate(size, Some(2048), 2))?;
    println!(
        "wrote {megabytes} MiB each to {}/clean.log and dense.log",
        dir.display()
    );
    Ok(())
}
