//! How a kind of plug-in (a harness, a container runtime) is declared: its variants, their names in
//! configuration and on the command line, and the list of them all come from one list, so a kind
//! cannot be added without a name or be missing from the list its registry's test walks.

/// Declares `pub enum $name` (deserialized from each variant's name, its `#[default]` the default)
/// with `ALL`, `as_str` and `from_name`.
macro_rules! kinds {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
        pub enum $name {
            $( $(#[$variant_meta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every kind, in the order declared.
            pub const ALL: &[$name] = &[$($name::$variant),+];

            /// Its name in configuration and on the command line.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The kind called `name`, if there is one.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|kind| kind.as_str() == name)
            }
        }
    };
}

pub(crate) use kinds;
