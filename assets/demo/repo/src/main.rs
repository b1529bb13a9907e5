//! A tiny greeter: the program stet's demo sends agents to work on.

mod count;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("{}", greeting());
    if let Some(text) = args.get(1) {
        println!("Your text has {} words.", count::words(text));
    }
}

/// The first line the program prints.
fn greeting() -> String {
    String::from("Hello, world!")
}
