//! The protobuf wire format, writing side only: what the Perfetto and pprof exports need
//! (varints, zigzag-free signed integers, doubles, strings and nested messages). Field
//! numbers and meanings come from the official `.proto` files named in each exporter;
//! the tests decode the output with those definitions, not with this module.

/// A protobuf message being written. Nested messages are built in a [`Message`] of their
/// own and appended with [`Message::message`] (protobuf needs their length first).
///
/// ```
/// use leakscope::export::encode::protobuf::Message;
/// let mut m = Message::default();
/// m.uint(1, 150);
/// assert_eq!(m.bytes(), &[0x08, 0x96, 0x01]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Message {
    buf: Vec<u8>,
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

impl Message {
    /// An empty message with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Message {
        Message {
            buf: Vec::with_capacity(n),
        }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    /// An unsigned integer, bool or enum field (`uint32`, `uint64`, `bool`, enums).
    pub fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    /// A signed integer field (`int32`, `int64`: two's complement, not zigzag).
    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    /// A `double` field.
    pub fn double(&mut self, field: u32, v: f64) {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A `string` or `bytes` field.
    pub fn bytes_field(&mut self, field: u32, v: &[u8]) {
        self.key(field, LEN);
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// A `string` field.
    pub fn string(&mut self, field: u32, v: &str) {
        self.bytes_field(field, v.as_bytes());
    }

    /// A nested message field.
    pub fn message(&mut self, field: u32, m: &Message) {
        self.bytes_field(field, &m.buf);
    }

    /// A packed `repeated` varint field.
    pub fn packed(&mut self, field: u32, values: impl IntoIterator<Item = u64>) {
        let mut inner = Message::default();
        for v in values {
            inner.varint(v);
        }
        self.bytes_field(field, &inner.buf);
    }

    /// Writes this message to `out` as field `field` of an enclosing message that is
    /// never held in memory (a `Trace`'s packets, written one by one); returns the bytes
    /// written.
    pub fn write_as_field(
        &self,
        field: u32,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<u64> {
        let mut head = Message::with_capacity(16);
        head.key(field, LEN);
        head.varint(self.buf.len() as u64);
        out.write_all(&head.buf)?;
        out.write_all(&self.buf)?;
        Ok((head.len() + self.len()) as u64)
    }

    /// The encoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Forgets the content, keeping the allocation (for messages built one after another).
    pub fn clear(&mut self) {
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Message;

    // Expected bytes from the protobuf encoding guide's worked examples.
    #[test]
    fn encodes_the_guide_examples() {
        let mut m = Message::default();
        m.uint(1, 150);
        assert_eq!(m.bytes(), [0x08, 0x96, 0x01]);
        let mut s = Message::default();
        s.string(2, "testing");
        assert_eq!(s.bytes(), b"\x12\x07testing");
        let mut outer = Message::default();
        outer.message(3, &m);
        assert_eq!(outer.bytes(), [0x1a, 0x03, 0x08, 0x96, 0x01]);
        let mut streamed = Vec::new();
        assert_eq!(m.write_as_field(3, &mut streamed).unwrap(), 5);
        assert_eq!(streamed, outer.bytes());
        let mut n = Message::default();
        n.int(1, -2);
        assert_eq!(n.len(), 11); // a negative int64 takes ten varint bytes
        let mut p = Message::default();
        p.packed(4, [3, 270, 86942]);
        assert_eq!(p.bytes(), [0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]);
    }
}
