//! Groups in the config: a name from /etc/group or a numeric gid. The broker group may use
//! the control socket and owns the rings' files (mode 0660).

use serde::Deserialize;

use crate::config::ConfigError;

/// A group, by name or number.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum GroupSpec {
    /// A gid.
    Id(u32),
    /// A name from /etc/group.
    Name(String),
}

pub fn with_origin(e: ConfigError, origin: &str) -> ConfigError {
    match e {
        ConfigError::UnknownGroup { name, .. } => ConfigError::UnknownGroup {
            origin: origin.to_owned(),
            name,
        },
        other => other,
    }
}

/// A group name or gid to a gid (names from /etc/group).
pub fn resolve_group(g: &GroupSpec, origin: &str) -> Result<u32, ConfigError> {
    match g {
        GroupSpec::Id(id) => Ok(*id),
        GroupSpec::Name(name) => {
            let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
            groups
                .lines()
                .filter_map(|l| {
                    let mut f = l.split(':');
                    let n = f.next()?;
                    let gid = f.nth(1)?.parse::<u32>().ok()?;
                    (n == name).then_some(gid)
                })
                .next()
                .ok_or_else(|| ConfigError::UnknownGroup {
                    origin: origin.to_owned(),
                    name: name.clone(),
                })
        }
    }
}
