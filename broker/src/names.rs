//! Ring and consumer names as the command line and the config take them: checked by the
//! rules the client library applies when it opens a ring or attaches a consumer, so a name
//! that can never be used is refused where it is written (a usage error, exit 64, on the
//! command line), not sent to the broker.

use shmring_layout::NAME_LEN;

/// A ring name for clap: 1 to 64 characters of `[A-Za-z0-9_.-]`, not starting with `.`
/// ([`shmring::names::check_ring_name`]).
pub fn ring_arg(name: &str) -> Result<String, String> {
    shmring::names::check_ring_name(name)
        .map(|()| name.to_owned())
        .map_err(|e| e.to_string())
}

/// A consumer name for clap ([`check_consumer_name`]).
pub fn consumer_arg(name: &str) -> Result<String, String> {
    check_consumer_name(name)
        .map(|()| name.to_owned())
        .map_err(|e| e.to_string())
}

/// Check consumer name `name`: 1 to [`NAME_LEN`] (48) bytes, without NUL, the rule of a
/// consumer entry's name. No consumer has a name outside it, so a request or a policy for
/// one would never apply.
pub fn check_consumer_name(name: &str) -> Result<(), shmring::AttachError> {
    if name.is_empty() || name.len() > NAME_LEN || name.contains('\0') {
        return Err(shmring::AttachError::BadName(name.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_are_checked_by_the_rule_of_an_entry() {
        for ok in ["c", "audit log's", &"x".repeat(48), "évian"] {
            assert!(check_consumer_name(ok).is_ok(), "{ok:?} refused");
        }
        for bad in ["", "a\0b", &"x".repeat(49)] {
            assert!(check_consumer_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
