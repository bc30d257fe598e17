//! `agent-inbox`: the one binary. `serve` runs the service, `migrate` applies the schema,
//! `token issue` prints an access token (and optionally a refresh token) for an operator.

mod cli;
mod serve;
mod token;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            cli::Command::Serve(args) => serve::serve(args).await,
            cli::Command::Migrate(args) => serve::migrate(args).await,
            cli::Command::Token { command: cli::TokenCommand::Issue(args) } => token::issue(args).await,
        }
    })
}
