// tensor.ts - tensors in and out: the dtype table (safetensors names, the typed array that
// views each), turning what a caller passes (a typed array, a {dtype, shape, data} object, a
// Shumai tensor) into a tf_doc_t that borrows its bytes, and turning a received tf_doc_t
// into {data, dtype, shape} objects whose data is a view over the received buffer.
//
// Received documents: every tensor's data is a typed array over the document's own memory
// (toArrayBuffer: no copy; a same-host get maps the stored document itself). The document is
// freed when the last of its arrays is garbage-collected (a FinalizationRegistry), or when
// the Client that received it is closed: its arrays are then detached first (length 0), so
// nothing can read freed memory. Bun's JS thread only.
import { CString, ptr, read, toArrayBuffer, type Pointer } from 'bun:ffi'
import { fullGC } from 'bun:jsc'
import { cstr, lib, TENSOR, TF_BORROW } from './lib'

type TypedArray =
  | Float64Array | Float32Array | Int32Array | Int16Array | Int8Array | Uint32Array
  | Uint16Array | Uint8Array | Uint8ClampedArray | BigInt64Array | BigUint64Array
  | (ArrayBufferView & { length: number })

export type DType =
  | 'F64' | 'F32' | 'F16' | 'BF16' | 'F8_E4M3' | 'F8_E5M2' | 'I64' | 'I32' | 'I16' | 'I8'
  | 'U64' | 'U32' | 'U16' | 'U8' | 'BOOL' | 'F8_E8M0' | 'F4' | 'F6_E2M3' | 'F6_E3M2'
  | 'F8_E4M3FNUZ' | 'F8_E5M2FNUZ' | 'C64'

/** A tensor as this package hands it out (and takes it in). */
export interface Tensor {
  /** C-order elements; for BF16, FP8 and the packed types the raw bits (Uint16Array /
   *  Uint8Array), for C64 interleaved real and imaginary float32 parts. */
  data: TypedArray
  dtype: DType
  shape: number[]
  /** The tensor's name in its document ("tensor" when sent by this package). */
  name?: string
}

/** What `put`, `call` and `tfetch` take: a typed array (a 1-D tensor of its type), a
 *  {dtype?, shape?, data} object, or a Shumai tensor (toFloat32Array() and shape). */
export type TensorLike =
  | TypedArray
  | { data: TypedArray | ArrayBuffer | number[]; dtype?: DType | string; shape?: number[] }
  | { toFloat32Array(): Float32Array; shape: number[] | bigint[]; provenance?: unknown }

const F16 = (globalThis as any).Float16Array
// name -> [bits per element, the typed array that views it]
const TYPES: Record<string, [number, any]> = {
  F64: [64, Float64Array], F32: [32, Float32Array], F16: [16, F16 ?? Uint16Array],
  BF16: [16, Uint16Array], F8_E4M3: [8, Uint8Array], F8_E5M2: [8, Uint8Array],
  I64: [64, BigInt64Array], I32: [32, Int32Array], I16: [16, Int16Array], I8: [8, Int8Array],
  U64: [64, BigUint64Array], U32: [32, Uint32Array], U16: [16, Uint16Array], U8: [8, Uint8Array],
  BOOL: [8, Uint8Array], F8_E8M0: [8, Uint8Array], F4: [4, Uint8Array], F6_E2M3: [6, Uint8Array],
  F6_E3M2: [6, Uint8Array], F8_E4M3FNUZ: [8, Uint8Array], F8_E5M2FNUZ: [8, Uint8Array],
  C64: [64, Float32Array]
}
export const DTYPES = Object.keys(TYPES) as DType[]

let codes: Map<string, number> | null = null
let names: string[] = []

// The library's code of each dtype (asked of tf_dtype_from_name, not assumed).
function code(name: string): number {
  if (!codes) {
    codes = new Map()
    const out = new Int32Array(1)
    for (const n of DTYPES) {
      if (lib().tf_dtype_from_name(cstr(n), ptr(out)) === 0) {
        codes.set(n, out[0])
        names[out[0]] = n
      }
    }
  }
  const c = codes.get(name)
  if (c === undefined) throw new TypeError(`tfetch: unknown dtype ${name} (one of ${DTYPES.join(' ')})`)
  return c
}

function dtypeOfArray(a: ArrayBufferView): DType {
  if (a instanceof Float32Array) return 'F32'
  if (a instanceof Float64Array) return 'F64'
  if (F16 && a instanceof F16) return 'F16'
  if (a instanceof Int32Array) return 'I32'
  if (a instanceof Int16Array) return 'I16'
  if (a instanceof Int8Array) return 'I8'
  if (a instanceof Uint32Array) return 'U32'
  if (a instanceof Uint16Array) return 'U16'
  if (a instanceof Uint8Array || a instanceof Uint8ClampedArray) return 'U8'
  if (a instanceof BigInt64Array) return 'I64'
  if (a instanceof BigUint64Array) return 'U64'
  throw new TypeError(`tfetch: no dtype for ${a.constructor.name} (pass {dtype, shape, data})`)
}

function byteLength(dtype: DType, shape: number[]): number {
  const n = shape.reduce((a, b) => a * b, 1)
  return Math.ceil((n * TYPES[dtype][0]) / 8)
}

function asBytes(data: TypedArray | ArrayBuffer | number[], dtype: DType): ArrayBufferView {
  if (ArrayBuffer.isView(data)) return data
  if (data instanceof ArrayBuffer) return new Uint8Array(data)
  if (Array.isArray(data)) {
    const T = TYPES[dtype][1]
    return T === BigInt64Array || T === BigUint64Array ? T.from(data, BigInt) : T.from(data)
  }
  throw new TypeError('tfetch: tensor data must be a typed array, an ArrayBuffer or an array')
}

function isShumai(t: any): boolean {
  return t && typeof t.toFloat32Array === 'function' && t.shape !== undefined
}

/** The Shumai provenance of t as the user id tfetchd gives it (hex, no leading zeros, '-'
 *  for negative words: proto/shumai.c), or undefined when t carries none. */
export function provenanceOf(t: any): string | undefined {
  if (!isShumai(t)) return undefined
  const p = t.provenance
  let v: bigint
  if (typeof p === 'number' && Number.isInteger(p)) v = BigInt(p)
  else if (typeof p === 'bigint') v = p
  else if (typeof p === 'string' && /^-?[0-9a-fA-F]{1,16}$/.test(p)) {
    v = BigInt('0x' + p.replace('-', ''))
    if (p.startsWith('-')) v = -v
  } else return undefined
  v = BigInt.asIntN(64, v)
  if (v === 0xffffffffn) return undefined      // Shumai's "none"
  return v < 0n ? '-' + (-v).toString(16) : v.toString(16)
}

/** Normalises what a caller passes to {dtype, shape, bytes}. */
export function normalize(t: TensorLike): { dtype: DType; shape: number[]; view: ArrayBufferView } {
  if (ArrayBuffer.isView(t)) {
    const a = t as TypedArray
    return { dtype: dtypeOfArray(a), shape: [a.byteLength / (a as any).BYTES_PER_ELEMENT], view: a }
  }
  if (isShumai(t)) {
    const s = t as any
    const view = s.toFloat32Array() as Float32Array
    return { dtype: 'F32', shape: Array.from(s.shape as ArrayLike<number | bigint>, Number), view }
  }
  const o = t as { data: any; dtype?: string; shape?: number[] }
  if (!o || o.data === undefined) throw new TypeError('tfetch: not a tensor (want a typed array, {dtype, shape, data} or a Shumai tensor)')
  const dtype = (o.dtype ? String(o.dtype).toUpperCase() : ArrayBuffer.isView(o.data) ? dtypeOfArray(o.data) : 'F32') as DType
  if (!(dtype in TYPES)) throw new TypeError(`tfetch: unknown dtype ${o.dtype} (one of ${DTYPES.join(' ')})`)
  const view = asBytes(o.data, dtype)
  const bits = TYPES[dtype][0]
  const shape = o.shape ? Array.from(o.shape, Number) : [Math.floor((view.byteLength * 8) / bits)]
  if (shape.some((d) => !Number.isInteger(d) || d < 0)) throw new TypeError(`tfetch: bad shape [${shape}]`)
  if (byteLength(dtype, shape) !== view.byteLength) {
    throw new TypeError(`tfetch: ${dtype}[${shape}] needs ${byteLength(dtype, shape)} bytes, data has ${view.byteLength}`)
  }
  return { dtype, shape, view }
}

const TENSOR_NAME = cstr('tensor')

/** A tf_doc_t borrowing each tensor's bytes; keep[] holds what must outlive the request. */
export function buildDoc(tensors: Record<string, TensorLike>, keep: unknown[]): Pointer {
  const L = lib()
  const doc = L.tf_doc_new()
  if (!doc) throw new Error('tfetch: out of memory')
  try {
    for (const [name, t] of Object.entries(tensors)) {
      const { dtype, shape, view } = normalize(t)
      if (shape.length > 8) throw new TypeError(`tfetch: rank ${shape.length} > 8`)
      const dims = new BigInt64Array(Math.max(shape.length, 1))
      shape.forEach((d, i) => (dims[i] = BigInt(d)))
      const nm = name === 'tensor' ? TENSOR_NAME : cstr(name)
      const data = view.byteLength ? ptr(view) : null
      keep.push(view, dims, nm)
      const st = L.tf_doc_add(doc, nm, code(dtype), shape.length, ptr(dims), data, view.byteLength, TF_BORROW)
      if (st !== 0) throw new TypeError(`tfetch: tensor ${name} ${dtype}[${shape}]: ${L.tf_strerror(st)}`)
    }
  } catch (e) {
    L.tf_doc_free(doc)
    throw e
  }
  return doc
}

// ---- received documents ---------------------------------------------------------------------

// Bytes of received documents not yet freed, and that figure at the last collection. The
// engine does not see this memory (it is the library's), so it would not collect for it:
// past GC_STEP more, the next completion collects first (takeCollect, collect) and frees the
// large documents found dead at once, so replies dropped by the caller are freed and their
// memory reused.
//
// After a turn of the event loop, and at once rather than through the registry: a caller
// that awaits one request after another, each completing inline (client.ts), runs on
// microtasks alone, and there the registry's callbacks (tasks) never run, nor could a
// collection find a reply dead (a weak reference made in a job keeps its target to the end
// of the job). Every reply such a loop dropped stayed mapped: a same-host call's answer holds
// its daemon buffer, so each call then needed fresh memory, 50-90 ms per 16 MiB on our VMs,
// where memory freed and taken again costs about 1 ms. Bun.gc(false) only asks (nothing was
// ever collected in such a loop); Bun.gc(true) also drops compiled code (5-12 ms, and the
// code to compile again); fullGC after a turn takes about 0.5 ms on a small heap.
const GC_STEP = 64 * 1048576
const LARGE = 1048576               // documents of this many bytes or more are swept
let heldBytes = 0
let heldAtGc = 0
let collectWanted = false
const large = new Set<DocRef>()

function held(n: number) {
  heldBytes += n
  if (heldBytes < heldAtGc) heldAtGc = heldBytes
  if (heldBytes - heldAtGc > GC_STEP) {
    heldAtGc = heldBytes
    collectWanted = true
  }
}

/** True once after GC_STEP more bytes were received: the caller should resolve after a
 *  turn of the event loop (setImmediate), calling collect() first. */
export function takeCollect(): boolean {
  const w = collectWanted
  collectWanted = false
  return w
}

/** Collects now and frees every large document whose arrays were found dead. */
export function collect() {
  fullGC()
  for (const ref of [...large]) if (ref.buffers.every((w) => w.deref() === undefined)) ref.free(false)
  heldAtGc = heldBytes
}

/** One received tf_doc_t: freed when all its arrays are collected, or by its Client. */
export class DocRef {
  live = 0
  bytes = 0
  buffers: WeakRef<ArrayBuffer>[] = []
  constructor(public doc: Pointer | null, public owner: Set<DocRef>) {
    owner.add(this)
  }
  // The registry's, once per array (the document may be freed already: collect, close).
  release() {
    if (--this.live <= 0) this.free(false)
  }
  free(detach: boolean) {
    if (!this.doc) return
    if (detach) {
      for (const w of this.buffers) {
        const b = w.deref() as any
        if (b && !b.detached && b.byteLength) b.transfer(0)
      }
    }
    lib().tf_doc_free(this.doc)
    this.doc = null
    large.delete(this)
    held(-this.bytes)
    this.owner.delete(this)
  }
}

const registry = new FinalizationRegistry<DocRef>((ref) => ref.release())

/** The tensors of a received doc, each a view over its bytes (the doc freed with them). */
export function wrapDoc(doc: Pointer, owner: Set<DocRef>): Tensor[] {
  const L = lib()
  const ref = new DocRef(doc, owner)
  const out: Tensor[] = []
  const n = L.tf_doc_count(doc)
  for (let i = 0; i < n; i++) {
    const t = L.tf_doc_at(doc, i) as Pointer
    const dtype = (names[read.i32(t, TENSOR.dtype)] ?? 'U8') as DType
    const rank = read.i32(t, TENSOR.rank)
    const shape: number[] = []
    for (let k = 0; k < rank; k++) shape.push(Number(read.i64(t, TENSOR.shape + 8 * k)))
    const nbytes = Number(read.u64(t, TENSOR.nbytes))
    const data = read.ptr(t, TENSOR.data) as Pointer
    const name = new CString(read.ptr(t, TENSOR.name) as Pointer).toString()
    let buf: ArrayBuffer
    if (nbytes > 0 && data) {
      buf = toArrayBuffer(data, 0, nbytes)
      ref.buffers.push(new WeakRef(buf))
      ref.live++
      ref.bytes += nbytes
      registry.register(buf, ref)
    } else {
      buf = new ArrayBuffer(0)
    }
    const T = TYPES[dtype][1]
    const bits = TYPES[dtype][0]
    const view = bits % 8 === 0 && nbytes % T.BYTES_PER_ELEMENT === 0 ? new T(buf) : new Uint8Array(buf)
    out.push({ data: view, dtype, shape, name })
  }
  if (ref.live === 0) {
    ref.free(false)
  } else {
    if (ref.bytes >= LARGE) large.add(ref)
    held(ref.bytes)
  }
  return out
}

/** Frees every doc still held by owner, detaching their arrays first. */
export function freeAll(owner: Set<DocRef>) {
  for (const ref of [...owner]) ref.free(true)
}
