//! Deterministic, realistic log/transcript text for the sanitizer benchmarks: build output, agent
//! JSON events, git and HTTP logs with ANSI colour, URLs, SHAs and UUIDs — optionally with a secret
//! every ~2 KB. Secrets are generated here at run time.

/// A small deterministic generator (xorshift64).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chars(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| char::from(alphabet[self.below(alphabet.len())]))
            .collect()
    }
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &[u8] = b"0123456789abcdef";
const WORDS: &[&str] = &[
    "build",
    "test",
    "passed",
    "failed",
    "request",
    "response",
    "module",
    "config",
    "handler",
    "session",
    "cache",
    "worker",
    "retry",
    "connection",
    "timeout",
    "parser",
    "token",
    "stream",
    "commit",
    "branch",
    "merge",
    "deploy",
    "install",
    "resolve",
    "compile",
    "warning",
    "finished",
    "started",
    "agent",
    "workspace",
];

fn line(rng: &mut Rng, out: &mut String) {
    let w = |rng: &mut Rng| rng.pick(WORDS);
    match rng.below(10) {
        0 => out.push_str(&format!(
            "2026-11-29T08:{:02}:{:02}.{:03}Z \x1b[32mINFO\x1b[0m {}::{}: {} {} in {}ms\n",
            rng.below(60), rng.below(60), rng.below(1000), w(rng), w(rng), w(rng), w(rng), rng.below(5000)
        )),
        1 => out.push_str(&format!(
            "{{\"id\":\"{}-{}-{}\",\"timestamp\":\"2026-11-29T08:15:02\",\"source\":\"agent\",\"kind\":\"ActionEvent\",\"action\":{{\"command\":\"cargo {} --{}\"}},\"thought\":\"I will {} the {} first\"}}\n",
            rng.chars(HEX, 8), rng.chars(HEX, 4), rng.chars(HEX, 12), w(rng), w(rng), w(rng), w(rng)
        )),
        2 => out.push_str(&format!(
            "   Compiling {}-{} v0.{}.{} (/workspace/crates/{})\n",
            w(rng), w(rng), rng.below(20), rng.below(20), w(rng)
        )),
        3 => out.push_str(&format!(
            "commit {} ({} -> {})\nAuthor: Dev <dev@example.com>\n",
            rng.chars(HEX, 40), w(rng), w(rng)
        )),
        4 => out.push_str(&format!(
            "GET https://api.example.com/v1/{}/{}?page={} 200 {}ms\n",
            w(rng), rng.chars(HEX, 12), rng.below(100), rng.below(900)
        )),
        5 => out.push_str(&format!(
            "test {}::{}_{} ... \x1b[1;32mok\x1b[0m\n",
            w(rng), w(rng), w(rng)
        )),
        6 => out.push_str(&format!(
            "warning: unused variable `{}_{}` at src/{}/{}.rs:{}:{}\n",
            w(rng), w(rng), w(rng), w(rng), rng.below(900), rng.below(80)
        )),
        7 => out.push_str(&format!(
            "Step {}/9 : RUN pip install --no-cache-dir -r requirements.txt\n ---> Running in {}\n ---> sha256:{}\n",
            rng.below(9), rng.chars(HEX, 12), rng.chars(HEX, 64)
        )),
        8 => out.push_str(&format!(
            "remote: git@github.com:octo/{}.git -> {} {}\n",
            w(rng), rng.chars(HEX, 7), w(rng)
        )),
        _ => {
            for _ in 0..(8 + rng.below(10)) {
                out.push_str(w(rng));
                out.push(' ');
            }
            out.push('\n');
        }
    }
}

fn secret(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => format!("export GITHUB_TOKEN=ghp_{}", rng.chars(ALNUM, 36)),
        1 => format!("Authorization: Bearer {}", rng.chars(ALNUM, 40)),
        2 => format!("OPENAI_API_KEY=sk-proj-{}", rng.chars(ALNUM, 120)),
        3 => format!(
            "git push https://x-access-token:{}@github.com/o/r.git",
            rng.chars(ALNUM, 36)
        ),
        4 => format!(
            "aws AKIA{}",
            rng.chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
        ),
        5 => format!("{{\"password\":\"{}\"}}", rng.chars(ALNUM, 16)),
        6 => format!(
            "hf_{} xoxb-{}-{}",
            rng.chars(ALNUM, 34),
            rng.chars(HEX, 12),
            rng.chars(ALNUM, 24)
        ),
        _ => format!("token glpat-{}", rng.chars(ALNUM, 20)),
    }
}

/// About `size` bytes of log text; with `secret_every` set, a secret line roughly that often.
pub(crate) fn generate(size: usize, secret_every: Option<usize>, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = String::with_capacity(size + 512);
    let mut next_secret = secret_every.unwrap_or(usize::MAX);
    while out.len() < size {
        line(&mut rng, &mut out);
        if out.len() >= next_secret {
            out.push_str(&secret(&mut rng));
            out.push('\n');
            next_secret = out.len() + secret_every.unwrap_or(usize::MAX - out.len());
        }
    }
    out.into_bytes()
}
