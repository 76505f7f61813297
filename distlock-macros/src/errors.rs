//! Error collection: the macro reports every problem it finds in one compile, each with its
//! own span, instead of stopping at the first.

/// Collects errors so that one pass reports every problem.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    /// `Err` with every collected error, or `Ok` if there were none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
