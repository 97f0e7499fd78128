//! A bare server process for crash tests: `mco-apiserver-testbin DIR [ADDR]`. It prints
//! the bound address on stdout once it serves.

use std::io::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: mco-apiserver-testbin DIR [ADDR]")?;
    let listen = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(dir, listen)).await?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", h.addr())?;
    out.flush()?;
    tokio::signal::ctrl_c().await?;
    h.shutdown().await;
    Ok(())
}
