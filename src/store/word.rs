//! Closed sets of words stored as text — task statuses and kinds, back-off types, catch-up and
//! overlap modes: enums in the code, parsed once where they are read (a row, a request) and
//! written as the word. Each backend converts them in its driver's terms (`sqlite/mod.rs`,
//! `postgres/mod.rs`); a stored word outside the set is an error there, never a default.

/// An enum stored as one of a closed set of words.
pub trait Word: Sized + Copy + 'static {
    /// What the words name, for an error about a value outside the set (`task status`).
    const WHAT: &'static str;
    /// Every value, in the order the API lists them.
    const ALL: &'static [Self];

    /// The stored and API spelling.
    fn word(&self) -> &'static str;

    /// The value spelled `word` (exact, lowercase), if any.
    fn from_word(word: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|w| w.word() == word)
    }

    /// The value of a stored `word`: a word outside the set is an error naming what the words
    /// are (`not a task status: "bogus"`), never a default.
    fn from_stored(word: &str) -> Result<Self, crate::store::Unreadable> {
        Self::from_word(word)
            .ok_or_else(|| crate::store::Unreadable(format!("not a {}: {word:?}", Self::WHAT)))
    }
}

/// Declares an enum of [`Word`]s: the variants with their words, serialized and displayed as
/// the word.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant),+
        }

        impl $crate::store::word::Word for $name {
            const WHAT: &'static str = $what;
            const ALL: &'static [Self] = &[$($name::$variant),+];

            fn word(&self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }
        }

        impl $name {
            /// The stored and API spelling (what [`Word::word`] gives, without the import).
            ///
            /// [`Word::word`]: $crate::store::word::Word::word
            pub fn as_str(&self) -> &'static str {
                $crate::store::word::Word::word(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::store::word::Word::word(self))
            }
        }
    };
}
pub(crate) use words;

/// Calls the macro `$convert` with every [`Word`] a column stores, so that both backends convert
/// the same set (`stored_words!` in `sqlite/mod.rs` and `postgres/mod.rs`): a new stored word
/// is added here once.
macro_rules! stored_word_types {
    ($convert:ident) => {
        $convert!(
            crate::retry::Backoff,
            crate::retry::Jitter,
            crate::store::endpoints::EndpointStatus,
            crate::store::events::EventStatus,
            crate::store::keys::Scope,
            crate::store::policies::PolicyStatus,
            crate::store::schedules::Catchup,
            crate::store::schedules::Overlap,
            crate::store::schedules::ScheduleStatus,
            crate::store::tasks::TaskKind,
            crate::store::tasks::TaskStatus
        );
    };
}
pub(crate) use stored_word_types;
