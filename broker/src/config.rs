//! The broker's TOML configuration: which rings to create, their shape, access and health
//! settings, and what to do when a consumer dies. `default.toml` is embedded and is what
//! `broker run` uses without `--config`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shmring::{ProducerMode, RingConfig};

use crate::group::{resolve_group, with_origin, GroupSpec};
use crate::human::serde_duration;

/// The embedded default configuration (one ring, `default`).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// The longest `stall_threshold` a ring may ask for: the broker sweeps every half of it, and
/// a day keeps that wait far inside what an `epoll_wait` timeout takes on every kernel
/// (about 24 days in milliseconds).
pub const MAX_STALL_THRESHOLD: Duration = Duration::from_secs(24 * 3600);

/// The longest `unblock_timeout` a ring may ask for: a hole held longer is not a wait
/// anyone chooses, and the status and metrics give it in milliseconds.
pub const MAX_UNBLOCK_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

/// The largest config file the broker reads: a config with hundreds of rings is a few
/// tens of kilobytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path names something other than a regular file.
    #[error("cannot read config {path}: it is {kind}, not a regular file: give the path of a config file")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is ("a FIFO", "a device", ...).
        kind: &'static str,
    },
    /// The file is larger than any config.
    #[error("cannot read config {path}: it is larger than {} bytes (1 MiB), which no config is: give the path of a config file", MAX_CONFIG_BYTES)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not valid TOML, or fields of the wrong type.
    #[error("config {origin} is not valid: {message}")]
    Parse {
        /// File name or "embedded default".
        origin: String,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A value out of range.
    #[error("config {origin}: ring {ring:?}: {message}")]
    Invalid {
        /// File name or "embedded default".
        origin: String,
        /// The ring.
        ring: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Group 4294967295, `(gid_t)-1`, which `fchown` takes as "no change".
    #[error("config {origin}: group 4294967295 is (gid_t)-1, which chown takes as \"leave the group as it is\", so no file would be given to it: use an existing group name or another gid")]
    NoChangeGid {
        /// File name or "embedded default".
        origin: String,
    },
    /// A group name that is not in /etc/group.
    #[error("config {origin}: group {name:?} is not in /etc/group: use an existing group name or a numeric gid")]
    UnknownGroup {
        /// File name or "embedded default".
        origin: String,
        /// The group.
        name: String,
    },
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Broker-wide settings.
    #[serde(default)]
    pub broker: BrokerSection,
    /// Rings by name.
    #[serde(default)]
    pub rings: BTreeMap<String, RingSpec>,
}

/// `[broker]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerSection {
    /// Group allowed on the control socket (and default group of the rings).
    pub group: Option<GroupSpec>,
    /// Serve Prometheus metrics at `http://ADDR:PORT/metrics` (off when absent;
    /// `broker run --metrics-listen` overrides it).
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// What the broker does when a consumer dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Log and keep its gating: its events wait for its restart.
    #[default]
    Alert,
    /// Stop its gating: producers move on; it resumes at the head on re-attach.
    Release,
    /// Stop the ring.
    StopRing,
}

impl Policy {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Alert => "alert",
            Policy::Release => "release",
            Policy::StopRing => "stop-ring",
        }
    }
}

/// `[rings.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RingSpec {
    /// Slots, a power of two.
    pub capacity: u64,
    /// Bytes per slot including its header.
    pub slot_size: u32,
    /// Consumer table size.
    pub max_consumers: u32,
    /// Producer table size.
    pub max_producers: u32,
    /// "single" or "multi".
    pub producer_mode: ModeSpec,
    /// Events of exactly this many bytes (a multiple of 8) in a fixed-size ring
    /// (`RingConfig::event_size`; needs `producer_mode = "single"`). Unset: stamped slots of
    /// `slot_size` bytes.
    pub event_size: Option<u32>,
    /// Events of any length up to at least this many bytes (a multiple of 8) in a ring of
    /// sized events (`RingConfig::max_event_size`: its slot is rounded up, and its events
    /// get all of it; needs `producer_mode = "single"`, not with `event_size`).
    pub max_event_size: Option<u32>,
    /// Slack of optional consumers (default capacity/2).
    pub optional_slack: Option<u64>,
    /// Segment file mode (default 0o600, 0o660 with a group). Read and write bits only;
    /// bits for others are refused unless `allow_world_access` is set.
    pub mode: Option<u32>,
    /// Allow a `mode` that gives others (every local user outside the owner and the group)
    /// any access to the ring's events: off unless set.
    pub allow_world_access: bool,
    /// Group owning the segment.
    pub group: Option<GroupSpec>,
    /// Pending and unmoved this long: STALLED.
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub stall_threshold: Duration,
    /// A dead producer's claim is repaired after this long.
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub unblock_timeout: Duration,
    /// Policy for dead consumers not named in `policies`.
    pub dead_policy: Policy,
    /// Policy per consumer name.
    pub policies: BTreeMap<String, Policy>,
    /// Durable required consumers that gate from the ring's creation
    /// (`RingConfig::declared`): events published before one first attaches wait for it.
    /// Applied when the broker creates the ring; a ring that exists is left as it is.
    pub declared_consumers: Vec<String>,
    /// Worker groups that gate from the ring's creation (`RingConfig::declared_groups`):
    /// events published before a group's first member joins wait for the group. Applied when
    /// the broker creates the ring.
    pub declared_groups: Vec<String>,
}

/// Producer mode as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeSpec {
    /// One producer.
    Single,
    /// Many producers.
    #[default]
    Multi,
}

impl Default for RingSpec {
    fn default() -> Self {
        let ring = RingConfig::default();
        Self {
            capacity: ring.capacity,
            slot_size: ring.slot_size,
            max_consumers: ring.max_consumers,
            max_producers: ring.max_producers,
            producer_mode: ModeSpec::Multi,
            event_size: None,
            max_event_size: None,
            optional_slack: None,
            mode: None,
            allow_world_access: false,
            group: None,
            stall_threshold: Duration::from_millis(500),
            unblock_timeout: Duration::from_secs(1),
            dead_policy: Policy::Alert,
            policies: BTreeMap::new(),
            declared_consumers: Vec::new(),
            declared_groups: Vec::new(),
        }
    }
}

impl RingSpec {
    /// The policy for a consumer named `name`.
    pub fn policy_for(&self, name: &str) -> Policy {
        self.policies.get(name).copied().unwrap_or(self.dead_policy)
    }

    /// The sweep period this ring asks for: half the stall threshold, at least 1 ms.
    pub fn sweep_period(&self) -> Duration {
        (self.stall_threshold / 2).max(Duration::from_millis(1))
    }

    /// Refuse a file mode that is not plain read/write bits, or that opens the ring to
    /// others without `allow_world_access`. Others are refused read as well as write: the
    /// ring's slots are its events, so a world-readable ring shows every event to every
    /// local user (and a client needs read+write to attach, so no client needs it).
    fn check_mode(&self, mode: u32) -> Result<(), String> {
        if mode & !0o777 != 0 {
            return Err(format!(
                "mode {mode:#o} has bits beyond 0o777 (setuid, setgid or sticky), which mean nothing for a ring file: use 0o600, or 0o660 with a group"
            ));
        }
        if mode & 0o007 != 0 && !self.allow_world_access {
            return Err(format!(
                "mode {mode:#o} gives every local user outside the owner and the group access to the ring's events (others may {}): use 0o600, or 0o660 with a group; to allow it anyway, set `allow_world_access = true` for this ring",
                match (mode & 0o004 != 0, mode & 0o002 != 0) {
                    (true, true) => "read and write them",
                    (false, true) => "write them",
                    (true, false) => "read them",
                    (false, false) => "execute the file",
                }
            ));
        }
        Ok(())
    }

    /// The client-crate configuration, with the broker's group as the fallback group.
    pub fn ring_config(&self, broker_group: Option<u32>) -> Result<RingConfig, ConfigError> {
        let group = match &self.group {
            Some(g) => Some(resolve_group(g, "ring")?),
            None => broker_group,
        };
        let default_mode = if group.is_some() { 0o660 } else { 0o600 };
        Ok(RingConfig {
            capacity: self.capacity,
            slot_size: self.slot_size,
            max_consumers: self.max_consumers,
            max_producers: self.max_producers,
            producer_mode: match self.producer_mode {
                ModeSpec::Single => ProducerMode::Single,
                ModeSpec::Multi => ProducerMode::Multi,
            },
            event_size: self.event_size,
            max_event_size: self.max_event_size,
            optional_slack: self.optional_slack,
            mode: self.mode.unwrap_or(default_mode),
            group,
            declared: self.declared_consumers.clone(),
            declared_groups: self.declared_groups.clone(),
        })
    }
}

impl Config {
    /// The embedded default.
    pub fn embedded() -> Result<Config, ConfigError> {
        Self::parse(DEFAULT_CONFIG, "embedded default")
    }

    /// Read and check a config file: a regular file of at most [`MAX_CONFIG_BYTES`].
    /// Anything else is refused before a byte is read. The file is opened non-blocking, so
    /// a FIFO at the path never waits for a writer, and read up to one byte past the cap,
    /// so a file that grows after the check is refused too.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        use rustix::fs::{Mode, OFlags};
        use std::io::Read;
        let read_error = |source: std::io::Error| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let file = std::fs::File::from(
            rustix::fs::open(path, flags, Mode::empty()).map_err(|e| read_error(e.into()))?,
        );
        let meta = file.metadata().map_err(read_error)?;
        if !meta.is_file() {
            return Err(ConfigError::NotRegular {
                path: path.to_owned(),
                kind: crate::file_kind::kind_name(meta.file_type()),
            });
        }
        let too_large = || ConfigError::TooLarge {
            path: path.to_owned(),
        };
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(too_large());
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| read_error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse and check config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        config.check(origin)?;
        Ok(config)
    }

    fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |ring: &str, message: String| ConfigError::Invalid {
            origin: origin.to_owned(),
            ring: ring.to_owned(),
            message,
        };
        let broker_group = self.broker_gid().map_err(|e| with_origin(e, origin))?;
        for (name, spec) in &self.rings {
            shmring::names::ring_path("check", name).map_err(|e| invalid(name, e.to_string()))?;
            let ring = spec
                .ring_config(broker_group)
                .map_err(|e| with_origin(e, origin))?;
            ring.geometry().map_err(|e| invalid(name, e.to_string()))?;
            spec.check_mode(ring.mode).map_err(|m| invalid(name, m))?;
            if spec.stall_threshold.is_zero() || spec.unblock_timeout.is_zero() {
                return Err(invalid(
                    name,
                    "stall_threshold and unblock_timeout must be above zero".into(),
                ));
            }
            if spec.stall_threshold > MAX_STALL_THRESHOLD {
                return Err(invalid(
                    name,
                    format!(
                        "stall_threshold must be at most 24h (the broker sweeps every half of it), not {:?}",
                        spec.stall_threshold
                    ),
                ));
            }
            if spec.unblock_timeout > MAX_UNBLOCK_TIMEOUT {
                return Err(invalid(
                    name,
                    format!(
                        "unblock_timeout must be at most 30 days (720h), not {:?}",
                        spec.unblock_timeout
                    ),
                ));
            }
            if let Some(c) = spec
                .policies
                .keys()
                .find(|c| crate::names::check_consumer_name(c).is_err())
            {
                return Err(invalid(
                    name,
                    format!("consumer name {c:?} in policies must be 1 to 48 bytes without NUL (no consumer's name holds NUL, so the policy would never apply)"),
                ));
            }
        }
        Ok(())
    }

    /// The broker's group, resolved.
    pub fn broker_gid(&self) -> Result<Option<u32>, ConfigError> {
        self.broker
            .group
            .as_ref()
            .map(|g| resolve_group(g, "broker"))
            .transpose()
    }

    /// The sweep period: the shortest any ring asks for (1 s with no rings).
    pub fn sweep_period(&self) -> Duration {
        self.rings
            .values()
            .map(RingSpec::sweep_period)
            .min()
            .unwrap_or(Duration::from_secs(1))
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
