//! [`LayerConfig`]: a layer's settings, as its builder collects them and its services share
//! them behind one `Arc`.

/// A layer's settings: its own options, and the hook that makes the responses it answers
/// itself. The hook stands apart so that changing it (which changes its type) moves the
/// options over as they are, whatever the layer.
#[derive(Clone)]
pub(crate) struct LayerConfig<O, R> {
    pub(crate) options: O,
    pub(crate) refusal: R,
}

impl<O, R> LayerConfig<O, R> {
    /// The same options with another refusal hook.
    pub(crate) fn with_refusal<M>(self, refusal: M) -> LayerConfig<O, M> {
        LayerConfig {
            options: self.options,
            refusal,
        }
    }
}
