//! The Zenoh side: session configuration and the two key expressions of a bridge.
//!
//! A bridge on key `KEY` uses `KEY/data` for batches (exporter -> importer) and `KEY/ack`
//! for confirmations (importer -> exporter). The session runs in peer mode unless a config
//! file says otherwise; without a config file, scouting (multicast and gossip) is off and the session
//! listens only where `--listen` says (nowhere by default), so a bridge opens exactly the
//! connections its flags name. A config file is taken as is, with the flags applied on top.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use zenoh::Wait;

/// Flags that configure the Zenoh session (shared by `export` and `import`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LinkArgs {
    /// Zenoh config file (JSON5); the flags below are applied on top of it.
    #[arg(long, value_name = "FILE")]
    pub zenoh_config: Option<PathBuf>,
    /// Endpoint to listen on, e.g. tcp/127.0.0.1:7447 (repeatable).
    #[arg(long, value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// Endpoint to connect to, e.g. tcp/127.0.0.1:7447 (repeatable).
    #[arg(long, value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// Zenoh mode: peer (default), client or router.
    #[arg(long, value_name = "MODE")]
    pub zenoh_mode: Option<String>,
    /// Any other Zenoh setting, as PATH=JSON5, e.g. connect/retry={period_max_ms:500}
    /// (repeatable).
    #[arg(long, value_name = "PATH=JSON5")]
    pub zenoh_set: Vec<String>,
}

impl LinkArgs {
    /// The session configuration these flags describe.
    pub fn config(&self) -> Result<zenoh::Config> {
        let mut cfg = match &self.zenoh_config {
            Some(path) => zenoh::Config::from_file(path)
                .map_err(|e| anyhow!("zenoh config {}: {e}", path.display()))?,
            None => {
                let mut c = zenoh::Config::default();
                set(&mut c, "mode", "\"peer\"")?;
                set(&mut c, "scouting/multicast/enabled", "false")?;
                // Gossip passes a peer's neighbours' locators on to it, and it connects to
                // them: off, so that the connections are the flags' alone.
                set(&mut c, "scouting/gossip/enabled", "false")?;
                set(&mut c, "listen/endpoints", "[]")?;
                c
            }
        };
        if let Some(mode) = &self.zenoh_mode {
            if !matches!(mode.as_str(), "peer" | "client" | "router") {
                bail!("zenoh mode {mode:?}: expected peer, client or router");
            }
            set(&mut cfg, "mode", &format!("{mode:?}"))?;
        }
        if !self.listen.is_empty() {
            set(&mut cfg, "listen/endpoints", &json_list(&self.listen))?;
        }
        if !self.connect.is_empty() {
            set(&mut cfg, "connect/endpoints", &json_list(&self.connect))?;
        }
        for kv in &self.zenoh_set {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--zenoh-set {kv:?}: expected PATH=JSON5"))?;
            set(&mut cfg, k, v)?;
        }
        Ok(cfg)
    }

    /// Open the session.
    pub fn open(&self) -> Result<zenoh::Session> {
        let cfg = self.config()?;
        zenoh::open(cfg)
            .wait()
            .map_err(|e| anyhow!("opening the zenoh session: {e}"))
    }
}

fn set(cfg: &mut zenoh::Config, key: &str, value: &str) -> Result<()> {
    cfg.insert_json5(key, value)
        .map_err(|e| anyhow!("zenoh setting {key}={value}: {e}"))
}

fn json_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(","))
}

/// The two key expressions of a bridge on `key`.
#[derive(Debug, Clone)]
pub struct Keys {
    /// Batches.
    pub data: zenoh::key_expr::KeyExpr<'static>,
    /// Confirmations.
    pub ack: zenoh::key_expr::KeyExpr<'static>,
}

impl Keys {
    /// Check `key` (a concrete key expression: no wildcards) and derive both keys.
    pub fn new(key: &str) -> Result<Self> {
        if key.contains('*') || key.contains('$') {
            bail!("key {key:?}: a bridge needs a concrete key expression, without wildcards");
        }
        let make = |suffix: &str| {
            zenoh::key_expr::KeyExpr::try_from(format!("{key}/{suffix}"))
                .map_err(|e| anyhow!("key {key:?} is not a valid zenoh key expression: {e}"))
        };
        Ok(Keys {
            data: make("data")?,
            ack: make("ack")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(Keys::new("shmring/orders").is_ok());
        assert!(Keys::new("shmring/*").is_err());
        assert!(Keys::new("a//b").is_err());
        assert_eq!(Keys::new("x").expect("key").data.as_str(), "x/data");
    }

    #[test]
    fn flags_apply_on_top_of_a_config_file() {
        let path = std::env::temp_dir().join(format!("bridge-link-{}.json5", std::process::id()));
        std::fs::write(
            &path,
            "{ mode: \"client\", scouting: { multicast: { enabled: false } }, connect: { endpoints: [\"tcp/127.0.0.1:7001\"] } }",
        )
        .expect("write the config file");
        let args = LinkArgs {
            zenoh_config: Some(path.clone()),
            connect: vec!["tcp/127.0.0.1:7002".into()],
            ..LinkArgs::default()
        };
        let cfg = args.config();
        let _ = std::fs::remove_file(&path);
        let cfg = cfg.expect("config");
        assert_eq!(cfg.get_json("mode").expect("mode"), "\"client\"");
        let connect = cfg.get_json("connect/endpoints").expect("connect");
        assert!(
            connect.contains("7002") && !connect.contains("7001"),
            "{connect}"
        );
        let missing = LinkArgs {
            zenoh_config: Some("/nonexistent/bridge.json5".into()),
            ..LinkArgs::default()
        };
        assert!(missing.config().is_err());
    }

    #[test]
    fn flags_reach_the_config() {
        let args = LinkArgs {
            listen: vec!["tcp/127.0.0.1:7999".into()],
            zenoh_set: vec!["connect/retry={period_init_ms:50}".into()],
            ..LinkArgs::default()
        };
        let cfg = args.config().expect("config");
        let listen = cfg.get_json("listen/endpoints").expect("listen");
        assert!(listen.contains("127.0.0.1:7999"), "{listen}");
        assert_eq!(
            cfg.get_json("scouting/multicast/enabled")
                .expect("multicast"),
            "false"
        );
        assert_eq!(
            cfg.get_json("scouting/gossip/enabled").expect("gossip"),
            "false"
        );
        let bad = LinkArgs {
            zenoh_set: vec!["nonsense".into()],
            ..LinkArgs::default()
        };
        assert!(bad.config().is_err());
        let bad_mode = LinkArgs {
            zenoh_mode: Some("satellite".into()),
            ..LinkArgs::default()
        };
        assert!(bad_mode.config().is_err());
    }
}
