//! What the examples share: their `--name value` arguments.

/// The number after `name` on the command line, or `default` if it is not there (an
/// example may unwrap: a bad number is the user's typo).
#[allow(clippy::unwrap_used)]
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap())
        .unwrap_or(default)
}
