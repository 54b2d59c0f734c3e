//! [`Codec`]: how a [`View`](crate::View) holds its objects' JSON texts — compressed with
//! zstd against the first text the view was given, as a raw-content dictionary.
//!
//! The objects of one view are one kind made by one producer, so they share most of their
//! text (field names, labels and annotations, the image, probes; they differ in names,
//! uids and timestamps): with the first as the dictionary, a 3 KiB Deployment packs into
//! about 330 bytes. With 10 000 services at zero the views' texts took about 110 MiB.
//! A text is unpacked when read, before it is parsed (which it already was): a few
//! microseconds per object against the parse's tens.

use std::sync::Arc;

use zstd::bulk::{Compressor, Decompressor};

/// zstd's level: -1, its fastest but one. On the views' objects of 300 services (1–3 KiB
/// each) it packed in about half the time of 1 or 3 (2 µs against 4), 10–30 % bigger
/// (Deployments 330 bytes against 265): packing is on the after-commit thread of every
/// reconcile that changes a view, and a few MiB at 10,000 services buy that time back.
const LEVEL: i32 = -1;

/// One packed text: a tag byte, then the zstd frame ([`ZSTD`]) or, if zstd failed (it
/// fails only when it cannot allocate), the text itself ([`PLAIN`]).
#[derive(Clone, Debug)]
pub(crate) struct Packed(Arc<[u8]>);

const PLAIN: u8 = 0;
const ZSTD: u8 = 1;

impl Packed {
    /// Bytes held (the tag included), for tests and sizing.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// A view's packer and unpacker; both use the first text packed as their dictionary.
#[derive(Default)]
pub(crate) struct Codec {
    contexts: Option<(Compressor<'static>, Decompressor<'static>)>,
}

impl Codec {
    fn contexts(
        &mut self,
        first: &[u8],
    ) -> Option<&mut (Compressor<'static>, Decompressor<'static>)> {
        if self.contexts.is_none() {
            let packer = Compressor::with_dictionary(LEVEL, first).ok()?;
            let unpacker = Decompressor::with_dictionary(first).ok()?;
            self.contexts = Some((packer, unpacker));
        }
        self.contexts.as_mut()
    }

    pub(crate) fn pack(&mut self, text: &str) -> Packed {
        let bytes = text.as_bytes();
        let zipped = self
            .contexts(bytes)
            .and_then(|(packer, _)| packer.compress(bytes).ok());
        let (tag, body) = match &zipped {
            Some(z) => (ZSTD, z.as_slice()),
            None => (PLAIN, bytes),
        };
        let mut out = Vec::with_capacity(body.len() + 1);
        out.push(tag);
        out.extend_from_slice(body);
        Packed(out.into())
    }

    /// The text `packed` was made from; `None` only if it cannot be unpacked (never for
    /// what this codec packed).
    pub(crate) fn unpack(&mut self, packed: &Packed) -> Option<String> {
        let (tag, body) = packed.0.split_first()?;
        let bytes = match *tag {
            PLAIN => body.to_vec(),
            ZSTD => {
                // The frame records its size: zstd's bulk compressor writes it.
                let size = zstd::zstd_safe::get_frame_content_size(body).ok()??;
                let (_, unpacker) = self.contexts.as_mut()?;
                unpacker
                    .decompress(body, usize::try_from(size).ok()?)
                    .ok()?
            }
            _ => return None,
        };
        String::from_utf8(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(name: &str, uid: &str) -> String {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("{name}-deployment"), "namespace": "default", "uid": uid,
                         "labels": {"serving.knative.dev/service": name,
                                    "serving.knative.dev/revision": format!("{name}-00001"),
                                    "app": format!("{name}-00001")}},
            "spec": {"replicas": 0, "template": {"spec": {"containers": [
                {"name": "user-container", "image": "registry.example/hello@sha256:0123456789abcdef",
                 "ports": [{"name": "user-port", "containerPort": 8080, "protocol": "TCP"}]}]}}},
            "status": {"observedGeneration": 1, "replicas": 0}
        })
        .to_string()
    }

    #[test]
    fn texts_come_back_as_they_went_in() {
        let mut c = Codec::default();
        let texts = [
            deployment("s00000", "0682b2a6-9598-4231-b053-1c05af9811c3"),
            deployment("s00001", "d5f48c32-75dc-44b8-b447-2d61e6b84b88"),
            "{}".to_string(),
            "é ünïcode ✓".to_string(),
            String::new(),
        ];
        let packed: Vec<Packed> = texts.iter().map(|t| c.pack(t)).collect();
        for (t, p) in texts.iter().zip(&packed) {
            assert_eq!(c.unpack(p).as_deref(), Some(t.as_str()));
        }
    }

    #[test]
    fn similar_texts_pack_small() {
        let mut c = Codec::default();
        c.pack(&deployment(
            "s00000",
            "0682b2a6-9598-4231-b053-1c05af9811c3",
        ));
        let other = deployment("s04711", "63b9deef-2cee-44e8-bc8f-8174da400aa7");
        let p = c.pack(&other);
        assert!(
            p.len() * 4 < other.len(),
            "{} bytes packed from {}",
            p.len(),
            other.len()
        );
    }

    #[test]
    fn a_plain_text_is_read_as_is() {
        let mut c = Codec::default();
        let mut bytes = vec![PLAIN];
        bytes.extend_from_slice(b"{\"a\":1}");
        assert_eq!(
            c.unpack(&Packed(bytes.into())).as_deref(),
            Some("{\"a\":1}")
        );
        assert_eq!(c.unpack(&Packed(Arc::from(&[9u8, 1, 2][..]))), None);
        assert_eq!(c.unpack(&Packed(Arc::from(&[][..]))), None);
    }
}
