'use strict';
// Arrow IPC framing between Flight messages and Arrow JS.
//
// A FlightData carries one IPC message split in two: `data_header` (the flatbuffer Message)
// and `data_body` (its buffers). An IPC stream frames the same message as
//   0xFFFFFFFF, int32 metadata length (8-byte aligned), flatbuffer + padding, body.
// Reads re-frame FlightData into a byte stream that Arrow JS's stream reader decodes
// (dictionaries, replacements and deltas included); writes cut the bytes of Arrow JS's stream
// writer back into messages.

const { RecordBatchReader } = require('apache-arrow');

const CONTINUATION = 0xffffffff;
const EMPTY = new Uint8Array(0);

// MessageHeader union tags of Arrow's Message.fbs
const HEADER = { NONE: 0, Schema: 1, DictionaryBatch: 2, RecordBatch: 3, Tensor: 4, SparseTensor: 5 };

function asBytes(value) {
  if (value == null) return EMPTY;
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  throw new TypeError('expected bytes');
}

/** The chunks of one IPC stream message made of a flatbuffer header and its body. */
function frameMessage(header, body) {
  header = asBytes(header);
  body = asBytes(body);
  const padding = (8 - (header.byteLength % 8)) % 8;
  const prefix = new Uint8Array(8);
  const view = new DataView(prefix.buffer);
  view.setUint32(0, CONTINUATION, true);
  view.setInt32(4, header.byteLength + padding, true);
  const chunks = [prefix, header];
  if (padding) chunks.push(new Uint8Array(padding));
  if (body.byteLength) chunks.push(body);
  return chunks;
}

/** The end-of-stream marker. */
function endOfStream() {
  const eos = new Uint8Array(8);
  new DataView(eos.buffer).setUint32(0, CONTINUATION, true);
  return eos;
}

/** The header type and body length of a flatbuffer Message (Arrow's Message.fbs). */
function messageInfo(header) {
  header = asBytes(header);
  const view = new DataView(header.buffer, header.byteOffset, header.byteLength);
  if (header.byteLength < 8) throw new Error('truncated IPC message header');
  const table = view.getUint32(0, true);
  const vtable = table - view.getInt32(table, true);
  const vtableLength = view.getUint16(vtable, true);
  const field = (i) => {
    const at = 4 + 2 * i;
    return at < vtableLength ? view.getUint16(vtable + at, true) : 0;
  };
  const typeAt = field(1);
  const lengthAt = field(3);
  return {
    headerType: typeAt ? view.getUint8(table + typeAt) : HEADER.NONE,
    bodyLength: lengthAt ? Number(view.getBigInt64(table + lengthAt, true)) : 0,
  };
}

/**
 * Cuts a byte stream (chunks as they come) into IPC messages: `push(chunk)` returns the
 * messages completed by that chunk, each `{header, body, headerType}`.
 */
class MessageCutter {
  constructor() {
    this._chunks = [];
    this._length = 0;
    this._ended = false;
  }

  _take(n) {
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      const head = this._chunks[0];
      const need = n - filled;
      if (head.byteLength <= need) {
        out.set(head, filled);
        filled += head.byteLength;
        this._chunks.shift();
      } else {
        out.set(head.subarray(0, need), filled);
        this._chunks[0] = head.subarray(need);
        filled += need;
      }
    }
    this._length -= n;
    return out;
  }

  _peekPrefix() {
    const bytes = this._take(8);
    this._chunks.unshift(bytes);
    this._length += 8;
    return new DataView(bytes.buffer);
  }

  push(chunk) {
    chunk = asBytes(chunk);
    if (chunk.byteLength) {
      this._chunks.push(chunk);
      this._length += chunk.byteLength;
    }
    const messages = [];
    while (!this._ended && this._length >= 8) {
      const prefix = this._peekPrefix();
      let skip = 8;
      let metaLength = prefix.getInt32(4, true);
      if (prefix.getUint32(0, true) !== CONTINUATION) {
        skip = 4; // the pre-0.15 format without the continuation marker
        metaLength = prefix.getInt32(0, true);
      }
      if (metaLength === 0) {
        this._ended = true;
        break;
      }
      if (this._length < skip + metaLength) break;
      const { bodyLength } = messageInfo(this._peekHeader(skip, metaLength));
      if (this._length < skip + metaLength + bodyLength) break;
      this._take(skip);
      const header = this._take(metaLength);
      const body = this._take(bodyLength);
      const info = messageInfo(header);
      messages.push({ header, body, headerType: info.headerType });
    }
    return messages;
  }

  _peekHeader(skip, metaLength) {
    const bytes = this._take(skip + metaLength);
    this._chunks.unshift(bytes);
    this._length += bytes.byteLength;
    return bytes.subarray(skip);
  }
}

/** The Arrow JS Schema of an IPC-encapsulated schema message (FlightInfo, GetSchema). */
function decodeSchema(bytes) {
  bytes = asBytes(bytes);
  if (!bytes.byteLength) return null;
  const stream = new Uint8Array(bytes.byteLength + 8);
  stream.set(bytes, 0);
  stream.set(endOfStream(), bytes.byteLength);
  const reader = RecordBatchReader.from(stream);
  reader.open();
  return reader.schema;
}

module.exports = { HEADER, asBytes, frameMessage, endOfStream, messageInfo, MessageCutter, decodeSchema };
