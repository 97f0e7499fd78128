//! A bare server process for crash tests: `mco-apiserver-testbin DIR [ADDR [DURABILITY]]`.
//! It prints the bound address on stdout once it serves.

use std::io::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: mco-apiserver-testbin DIR [ADDR [DURABILITY]]")?;
    let listen = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    let mut cfg = mco_apiserver::Config::new(dir, listen);
    if let Some(d) = args.next() {
        cfg.durability = d.parse()?;
    }
    let h = mco_apiserver::Server::start(cfg).await?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", h.addr())?;
    out.flush()?;
    tokio::signal::ctrl_c().await?;
    h.shutdown().await;
    Ok(())
}
