//! The names of the configuration enums: one `name()` and one `FromStr` per enum, the
//! same for Rust callers, the Python bindings and snapshots' error messages.

/// Declares an enum's names: `NAMES`, `name()` and `FromStr` (an unknown name is a
/// `ConfigError` of `setting` that lists the names, calling the value `what`, the
/// setting's name by default). `"a" | "b" => V` accepts `"b"` as another spelling of
/// `V`, whose name stays `"a"`.
macro_rules! named {
    ($ty:ty, $setting:literal, { $($body:tt)* }) => {
        $crate::names::named!($ty, $setting, $setting, { $($body)* });
    };
    ($ty:ty, $setting:literal, $what:literal, { $($name:literal $(| $alias:literal)* => $v:path),+ $(,)? }) => {
        impl $ty {
            /// Every name, in order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The name the configuration (and Python) uses.
            pub fn name(self) -> &'static str {
                match self {
                    $($v => $name,)+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::error::TidemarkError;

            fn from_str(s: &str) -> $crate::error::Result<Self> {
                match s {
                    $($name $(| $alias)* => Ok($v),)+
                    other => Err($crate::names::unknown($setting, $what, other, Self::NAMES)),
                }
            }
        }
    };
}
pub(crate) use named;

/// The error for a name that is not one of `names`.
pub(crate) fn unknown(
    setting: &str,
    what: &str,
    got: &str,
    names: &[&str],
) -> crate::error::TidemarkError {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let options = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    };
    crate::error::TidemarkError::config(setting, format!("unknown {what} {got:?}: use {options}"))
}

#[cfg(test)]
mod tests {
    use crate::pipeline::{EmitMode, LateRule};
    use crate::time::KeyEvictionPolicy;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for n in LateRule::NAMES {
            assert_eq!(n.parse::<LateRule>().unwrap().name(), *n);
        }
        assert_eq!(
            "lru".parse::<KeyEvictionPolicy>().unwrap(),
            KeyEvictionPolicy::LeastRecentlyActive
        );
        let e = "bogus".parse::<EmitMode>().unwrap_err().to_string();
        assert!(
            e.contains(r#"unknown emit "bogus": use "on_window_close" or "on_update""#),
            "{e}"
        );
    }
}
