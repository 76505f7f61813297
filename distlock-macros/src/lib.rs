//! Procedural macros for `distlock`. Use them through `distlock::distributed_lock`.
