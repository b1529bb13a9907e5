mod branch;
mod brief;
mod cli;
