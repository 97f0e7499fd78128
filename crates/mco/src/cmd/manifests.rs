//! `mco manifests`: print what an install needs.

use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The CustomResourceDefinitions, as one YAML stream.
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Crds { out_dir: None } => {
            std::io::stdout().write_all(mco_api::crds::all_yaml()?.as_bytes())?;
        }
        What::Crds { out_dir: Some(dir) } => {
            std::fs::create_dir_all(&dir)?;
            for crd in mco_api::crds::all() {
                let path = dir.join(mco_api::crds::file_name(&crd));
                std::fs::write(&path, mco_api::crds::to_yaml(&crd)?)
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            }
        }
    }
    Ok(())
}
