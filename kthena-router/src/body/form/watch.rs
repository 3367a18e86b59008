//! The watch for a second `model` part in a multipart upload whose rest streams through
//! ([`FormWatch`]): the router routes by the first `model` part, an engine may read the last,
//! so a form naming two models must not reach the engine whole.

use super::{Bytes, Context, Error, Future, Infallible, Pin, Poll, duplicate_model, mpsc};

/// The watch itself: `multer` reads the form from the chunks fed to it (the held prefix,
/// then each chunk of the rest as it goes to the engine) and stops at a second `model`
/// part. A form `multer` cannot read is left to the engine (it answers for it).
pub(crate) struct FormWatch {
    feed: Option<mpsc::UnboundedSender<Bytes>>,
    scan: Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>,
    /// The scan ended: nothing more to feed or poll.
    done: bool,
}

impl std::fmt::Debug for FormWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FormWatch")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl FormWatch {
    /// A watch over the form of `boundary` whose first bytes are `prefix`.
    pub(crate) fn new(prefix: Bytes, boundary: &str) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        // Cannot fail: the receiver is alive.
        let _ = tx.send(prefix);
        let stream = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|c| c.map(Ok::<_, Infallible>))
        });
        let form = multer::Multipart::new(stream, boundary.to_owned());
        Self {
            feed: Some(tx),
            scan: Box::pin(at_most_one_model(form)),
            done: false,
        }
    }

    /// Reads `chunk` (the next bytes of the form; `None`: the form ended) as far as it goes.
    /// The scan's buffer is drained on each call, so the watch holds at most about one
    /// chunk.
    ///
    /// # Errors
    /// [`Error::InvalidField`] (`param` `model`) once a second `model` part begins.
    pub(crate) fn read(
        &mut self,
        chunk: Option<&Bytes>,
        cx: &mut Context<'_>,
    ) -> Result<(), Error> {
        if self.done {
            return Ok(());
        }
        match (chunk, &self.feed) {
            (Some(c), Some(tx)) => {
                let _ = tx.send(c.clone());
            }
            _ => self.feed = None,
        }
        match self.scan.as_mut().poll(cx) {
            Poll::Pending => Ok(()),
            Poll::Ready(r) => {
                self.done = true;
                self.feed = None;
                r
            }
        }
    }
}

/// Reads every part of `form`, failing at a second part named `model`; a form `multer`
/// cannot read ends the scan quietly.
pub(super) async fn at_most_one_model(mut form: multer::Multipart<'static>) -> Result<(), Error> {
    let mut models = 0;
    while let Ok(Some(mut field)) = form.next_field().await {
        if field.name() == Some("model") {
            models += 1;
            if models > 1 {
                return Err(duplicate_model());
            }
        }
        while let Ok(Some(_)) = field.chunk().await {}
    }
    Ok(())
}
