//! The metrics port's flags, declared once for every command line that serves metrics (the
//! controller's and the daemon's), which flatten [`Args`] into theirs.

use std::path::PathBuf;

use crate::{Mode, Settings};

/// `--metrics-auth`, `--metrics-tls-cert-file` and `--metrics-tls-key-file`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
// Not `Args`, the group every other `Args` struct would take: the flattening ones among them.
#[group(id = "MetricsAuthArgs")]
pub struct Args {
    /// Who may read /metrics: `none` (plain HTTP, anyone) or `delegated` (HTTPS; the caller's
    /// bearer token is checked with a TokenReview, then `get` on /metrics with a
    /// SubjectAccessReview).
    #[arg(long, default_value = "none")]
    pub metrics_auth: Mode,
    /// The metrics serving certificate (PEM) with --metrics-auth=delegated; without it a
    /// self-signed one is generated at start.
    #[arg(long, requires = "metrics_tls_key_file")]
    pub metrics_tls_cert_file: Option<PathBuf>,
    /// The key of --metrics-tls-cert-file (PEM).
    #[arg(long, requires = "metrics_tls_cert_file")]
    pub metrics_tls_key_file: Option<PathBuf>,
}

impl Args {
    /// The id of `--metrics-auth`, for a command line that words its help for its own port
    /// (`Command::mut_arg`).
    pub const MODE_ID: &'static str = "metrics_auth";

    /// What the flags say, not yet validated ([`Settings::validate`]).
    pub fn settings(&self) -> Settings {
        Settings::from(self.clone())
    }
}

impl From<Args> for Settings {
    fn from(a: Args) -> Settings {
        Settings {
            mode: a.metrics_auth,
            cert_file: a.metrics_tls_cert_file,
            key_file: a.metrics_tls_key_file,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// A command line's own `Args`, as the daemon's is named.
    mod command {
        #[derive(Debug, clap::Args)]
        pub struct Args {
            #[arg(long)]
            pub node: Option<String>,
            #[command(flatten)]
            pub metrics: super::Args,
        }
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: command::Args,
    }

    fn parse(args: &[&str]) -> Result<Settings, clap::Error> {
        let argv = std::iter::once("cli").chain(args.iter().copied());
        Ok(Cli::try_parse_from(argv)?.args.metrics.settings())
    }

    #[test]
    fn the_defaults_serve_plain_http() {
        assert_eq!(parse(&[]).unwrap(), Settings::default());
    }

    #[test]
    fn the_flags_become_settings() {
        let s = parse(&[
            "--metrics-auth=delegated",
            "--metrics-tls-cert-file=/tls/tls.crt",
            "--metrics-tls-key-file=/tls/tls.key",
        ])
        .unwrap();
        assert_eq!(
            s,
            Settings {
                mode: Mode::Delegated,
                cert_file: Some("/tls/tls.crt".into()),
                key_file: Some("/tls/tls.key".into()),
            }
        );
    }

    #[test]
    fn an_unknown_mode_is_refused_in_the_modes_words() {
        let e = parse(&["--metrics-auth=tls"]).unwrap_err().to_string();
        assert!(e.contains("--metrics-auth"), "{e}");
        assert!(e.contains("neither \"none\" nor \"delegated\""), "{e}");
    }

    #[test]
    fn each_certificate_file_requires_the_other() {
        for one in ["--metrics-tls-cert-file=/c", "--metrics-tls-key-file=/k"] {
            let e = parse(&["--metrics-auth=delegated", one]).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{one}"
            );
        }
    }

    #[test]
    fn the_flags_keep_their_names_and_help() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let help = |id: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
            (
                arg.get_long().unwrap().to_string(),
                arg.get_help().unwrap().to_string(),
            )
        };
        assert_eq!(
            help("metrics_auth"),
            (
                "metrics-auth".into(),
                "Who may read /metrics: `none` (plain HTTP, anyone) or `delegated` (HTTPS; the caller's bearer token is checked with a TokenReview, then `get` on /metrics with a SubjectAccessReview)".into()
            )
        );
        assert_eq!(
            help("metrics_tls_cert_file"),
            (
                "metrics-tls-cert-file".into(),
                "The metrics serving certificate (PEM) with --metrics-auth=delegated; without it a self-signed one is generated at start".into()
            )
        );
        assert_eq!(
            help("metrics_tls_key_file"),
            (
                "metrics-tls-key-file".into(),
                "The key of --metrics-tls-cert-file (PEM)".into()
            )
        );
    }

    #[test]
    fn the_mode_id_names_the_mode_flag() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == Args::MODE_ID)
            .unwrap();
        assert_eq!(arg.get_long(), Some("metrics-auth"));
    }
}
