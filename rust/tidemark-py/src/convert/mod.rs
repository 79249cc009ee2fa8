//! Conversions between Python and the core, used by every class module: Arrow data
//! ([`arrow`]), keys ([`keys`]), the configuration dict ([`config`]) and what the
//! classes return ([`dicts`]). They depend on nothing in this crate but
//! [`crate::error`] and [`crate::clock`].

pub mod arrow;
pub mod config;
pub mod dicts;
pub mod keys;
