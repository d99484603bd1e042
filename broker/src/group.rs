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

/// The gid `(gid_t)-1`: `chown` and `fchown` take it as "leave the group as it is", so no
/// file can be given to it.
pub const NO_CHANGE_GID: u32 = u32::MAX;

pub fn with_origin(e: ConfigError, origin: &str) -> ConfigError {
    match e {
        ConfigError::UnknownGroup { name, .. } => ConfigError::UnknownGroup {
            origin: origin.to_owned(),
            name,
        },
        ConfigError::NoChangeGid { .. } => ConfigError::NoChangeGid {
            origin: origin.to_owned(),
        },
        other => other,
    }
}

/// A group name or gid to a gid (names from /etc/group). [`NO_CHANGE_GID`] is refused,
/// however it is given.
pub fn resolve_group(g: &GroupSpec, origin: &str) -> Result<u32, ConfigError> {
    let gid = match g {
        GroupSpec::Id(id) => *id,
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
                })?
        }
    };
    if gid == NO_CHANGE_GID {
        return Err(ConfigError::NoChangeGid {
            origin: origin.to_owned(),
        });
    }
    Ok(gid)
}
