// client.ts - the Client (a tfetchd base URL, its settings, Promises for get/put/call) and
// Shumai's tfetch(url[, tensor]) on top of it.
//
// Each Client owns a libtfetch driver (tf_driver_t, client/driver.c): a thread of the
// library's own that owns a tf_client_t, starts the requests this thread submits, drives
// them over HTTP, UCX or same-host shared memory, and queues their completions. When a
// completion arrives to an empty queue the driver calls one thread-safe JSCallback (shared
// by every Client, never closed), which posts a task to Bun's event loop; that task reaps
// every waiting completion (tf_driver_reap) and settles the Promises. Nothing polls. While
// requests are pending a ref'd timer that never fires keeps the process alive, and the
// Client itself is held (so a dropped Client still completes what it started).
//
// Owns: the driver (freed by close() or when the Client is garbage-collected), the documents
// sent (borrowing the caller's arrays until completion) and the received documents not yet
// collected (freed, their arrays detached, by close()). Bun's JS thread only.
import { JSCallback, ptr, type Pointer } from 'bun:ffi'
import {
  COMPLETION, cstr, FORMAT_SAFETENSORS, lib, OP, REQUEST, RESULT, TF_DRIVER_INLINE, TF_OK, TRANSPORTS
} from './lib'
import { buildDoc, collect, DocRef, freeAll, provenanceOf, takeCollect, wrapDoc, type Tensor, type TensorLike } from './tensor'

/** What happened to a request: the transport that carried it, and how it ended. */
export interface Outcome {
  /** "http", "ucx/sysv+cma", "shm/memfd", ... ("" when it never started) */
  transport: string
  /** Why it went over HTTP although the policy allowed UCX ("" when it did not fall back). */
  fallback: string
  /** The tfetch status: 0, or a negative TF_E* value (see `code`). */
  status: number
  /** The status's name: "TF_OK", "TF_ENOTFOUND", ... */
  code: string
  /** The HTTP status of the answer (also for UCX and shm, which carry it); 0 if none. */
  httpStatus: number
  requestId: string
  op: string
  bytesSent: number
  bytesReceived: number
  seconds: number
  /** The server's or the client's message; "" on success. */
  error: string
}

/** A failed request: the tfetch status and its name, the HTTP status and the message. */
export class TfetchError extends Error {
  readonly status: number
  readonly code: string
  readonly httpStatus: number
  readonly outcome: Outcome
  constructor(o: Outcome) {
    super(`tfetch: ${o.op || 'request'} failed: ${o.code}${o.httpStatus ? ` (HTTP ${o.httpStatus})` : ''}: ${o.error || lib().tf_strerror(o.status)}`)
    this.name = 'TfetchError'
    this.status = o.status
    this.code = o.code
    this.httpStatus = o.httpStatus
    this.outcome = o
  }
}

export interface ClientOptions {
  /** Tfetch-User of every request (Shumai's provenance id; [A-Za-z0-9._-]{1,128}). */
  user?: string
  /** A bearer token for a tfetchd with auth-tokens (default: $TFETCH_TOKEN). */
  token?: string
  /** "auto" (default: upgrade to shared memory or UCX when both ends can, else HTTP, saying
   *  why), "http", or "ucx" (strict: fail rather than fall back). */
  transport?: 'auto' | 'http' | 'ucx'
  /** Whole-request timeout in milliseconds (default 60000; 0: none). */
  timeout?: number
  /** Connections per server for HTTP (1..4096, default 16). */
  maxConnections?: number
}

export interface RequestOptions {
  /** Tfetch-User for this request only. */
  user?: string
  /** This request's timeout in milliseconds (< 0: none). */
  timeout?: number
  /** get: long-poll up to this many milliseconds until the tensor exists. */
  wait?: number
}

interface Job {
  resolve: (v: any) => void
  reject: (e: unknown) => void
  inDoc: Pointer | null
  keep: unknown[] | null
  all: boolean
}

// ---- the one notify callback and the drivers it serves ------------------------------------

const cores = new Map<number, Core>()
let notify: JSCallback | null = null
let nextId = 1

function notifyPtr(): Pointer {
  if (!notify) {
    notify = new JSCallback((id: number) => cores.get(Number(id))?.drain(), {
      args: ['ptr'],
      returns: 'void',
      threadsafe: true
    })
  }
  return notify.ptr as Pointer
}

const decoder = new TextDecoder()

function fixed(b: Uint8Array, off: number, max: number): string {
  let end = b.indexOf(0, off)
  if (end < 0 || end > off + max) end = off + max
  return end === off ? '' : decoder.decode(b.subarray(off, end))
}

const RESULT_SIZE = 632

// An Outcome over a copy of a tf_result_t: each field decoded on first use.
class Result implements Outcome {
  private v: DataView
  private cache: Record<string, string> = {}
  constructor(private b: Uint8Array) {
    this.v = new DataView(b.buffer, b.byteOffset, b.byteLength)
  }
  private str(key: string, off: number, max: number): string {
    return (this.cache[key] ??= fixed(this.b, off, max))
  }
  get transport() { return this.str('transport', RESULT.transport, 32) }
  get fallback() { return this.str('fallback', RESULT.fallback, 160) }
  get requestId() { return this.str('requestId', RESULT.request_id, 129) }
  get op() { return this.str('op', RESULT.op, 16) }
  get error() { return this.str('error', RESULT.error, 256) }
  get status() { return this.v.getInt32(RESULT.status, true) }
  get code() { return codeName(this.status) }
  get httpStatus() { return this.v.getInt32(RESULT.http_status, true) }
  get bytesSent() { return Number(this.v.getBigUint64(RESULT.bytes_sent, true)) }
  get bytesReceived() { return Number(this.v.getBigUint64(RESULT.bytes_received, true)) }
  get seconds() { return this.v.getFloat64(RESULT.seconds, true) }
  toJSON(): Outcome {
    const { transport, fallback, status, code, httpStatus, requestId, op, bytesSent, bytesReceived, seconds, error } = this
    return { transport, fallback, status, code, httpStatus, requestId, op, bytesSent, bytesReceived, seconds, error }
  }
  [Symbol.for('nodejs.util.inspect.custom')]() {
    return this.toJSON()
  }
}

const codeNames = new Map<number, string>()
function codeName(st: number): string {
  let n = codeNames.get(st)
  if (n === undefined) {
    n = String(lib().tf_err_name(st))
    codeNames.set(st, n)
  }
  return n
}

// The state of one Client that outlives it while requests run (see the file's comment).
class Core {
  d: Pointer | null
  id = nextId++
  pending = new Map<number, Job>()
  docs = new Set<DocRef>()
  nextTag = 1
  last: Outcome | null = null
  holder: Client | null = null
  fast = false
  burst = 0                         // requests made since this thread last yielded
  lastBatch = 0                     // completions the last drain took (> 1: in parallel)
  endBurst = () => {
    this.burst = 0
  }
  keepAlive = setInterval(() => {}, 1 << 30)
  rq = new ArrayBuffer(REQUEST.size)
  rqView = new DataView(this.rq)
  comp = new Uint8Array(COMPLETION.size)
  compView = new DataView(this.comp.buffer)
  urls = new Map<string, Buffer>()

  constructor(c: Pointer, public base: string) {
    this.keepAlive.unref()
    cores.set(this.id, this)
    const out = new BigUint64Array(1)
    const st = lib().tf_driver_new(c, notifyPtr(), this.id as unknown as Pointer, ptr(out))
    if (st !== TF_OK) {
      cores.delete(this.id)
      clearInterval(this.keepAlive)
      throw new Error(`tfetch: cannot start the driver: ${lib().tf_strerror(st)}`)
    }
    this.d = Number(out[0]) as Pointer
    this.compView.setBigUint64(0, BigInt(COMPLETION.size), true)
  }

  url(u: string): Buffer {
    let b = this.urls.get(u)
    if (!b) {
      if (this.urls.size > 256) this.urls.clear()
      b = cstr(u)
      this.urls.set(u, b)
    }
    return b
  }

  submit(op: number, url: string, body: Record<string, TensorLike> | null, o: RequestOptions,
    all: boolean, holder: Client): Promise<any> {
    if (!this.d) return Promise.reject(new Error('tfetch: the client is closed'))
    const keep: unknown[] = []
    let inDoc: Pointer | null
    try {
      inDoc = body ? buildDoc(body, keep) : null
    } catch (e) {
      return Promise.reject(e)
    }
    const v = this.rqView
    const u = this.url(url)
    const user = o.user !== undefined ? cstr(o.user) : null
    v.setBigUint64(0, BigInt(REQUEST.size), true)
    v.setInt32(REQUEST.op, op, true)
    v.setBigUint64(REQUEST.url, BigInt(ptr(u)), true)
    v.setBigUint64(REQUEST.in, BigInt(inDoc ?? 0), true)
    v.setBigInt64(REQUEST.wait_ms, BigInt(Math.max(0, Math.ceil(o.wait ?? 0))), true)
    const t = o.timeout === undefined ? 0 : o.timeout < 0 ? -1 : Math.max(1, Math.ceil(o.timeout))
    v.setBigInt64(REQUEST.timeout_ms, BigInt(t), true)
    v.setInt32(REQUEST.format, FORMAT_SAFETENSORS, true)
    v.setBigUint64(REQUEST.request_id, 0n, true)
    v.setInt32(REQUEST.transport, 0, true)
    v.setBigUint64(REQUEST.user, BigInt(user ? ptr(user) : 0), true)
    const tag = this.nextTag++
    let job!: Job
    const p = new Promise((resolve, reject) => {
      job = { resolve, reject, inDoc, keep, all }
    })
    // Inline (on this thread, up to 1 ms, no hand-off) for a request made alone: once this
    // client reached the server over shared memory or UCX (the first request may negotiate,
    // which the driver does), with nothing else pending, and only the first of the requests
    // made in one run of this thread (a burst or a pipeline goes to the driver, in parallel);
    // and to this client's own server (another, reached through tfetch(url), may negotiate).
    const first = this.burst++ === 0
    if (first) queueMicrotask(this.endBurst)
    const inline = this.fast && first && this.pending.size === 0 && this.lastBatch <= 1 &&
      url.startsWith(this.base + '/') ? TF_DRIVER_INLINE : 0
    this.pending.set(tag, job)
    const st = lib().tf_driver_submit(this.d, ptr(this.rq), tag, inline)
    if (st !== TF_OK) {
      this.pending.delete(tag)
      if (inDoc) lib().tf_doc_free(inDoc)
      return Promise.reject(new Error(`tfetch: cannot submit: ${lib().tf_strerror(st)}`))
    }
    if (inline) this.drain()
    if (this.pending.size && !this.holder) {
      this.keepAlive.ref()
      this.holder = holder
    }
    return p
  }

  // The completion's tf_result_t, decoded when read (a copy: the buffer is reused).
  outcome(): Outcome {
    const r = COMPLETION.result
    return new Result(this.comp.slice(r, r + RESULT_SIZE))
  }

  // Takes every waiting completion and settles its Promise (Bun's JS thread).
  drain() {
    const L = lib()
    const v = this.compView
    const cp = ptr(this.comp)
    let n = 0
    while (this.d && L.tf_driver_reap(this.d, cp) === TF_OK) {
      n++
      const tag = Number(v.getBigUint64(COMPLETION.tag, true))
      const status = v.getInt32(COMPLETION.status, true)
      const doc = Number(v.getBigUint64(COMPLETION.doc, true)) as Pointer
      const o = this.outcome()
      this.last = o
      if (!this.fast) this.fast = o.transport !== 'http' && o.transport !== ''
      const job = this.pending.get(tag)
      this.pending.delete(tag)
      if (job?.inDoc) L.tf_doc_free(job.inDoc)
      if (!job) {
        if (doc) L.tf_doc_free(doc)
        continue
      }
      if (status !== TF_OK) {
        if (doc) L.tf_doc_free(doc)
        job.reject(new TfetchError(o))
      } else if (!doc) {
        job.resolve(undefined)
      } else {
        try {
          const ts = wrapDoc(doc, this.docs)
          const v = job.all ? Object.fromEntries(ts.map((t) => [t.name, t])) : ts[0]
          if (takeCollect()) {
            setImmediate(() => {                // see tensor.ts, held()
              collect()
              job.resolve(v)
            })
          } else {
            job.resolve(v)
          }
        } catch (e) {
          job.reject(e)
        }
      }
    }
    if (n) this.lastBatch = n
    this.idle()
  }

  idle() {
    if (this.pending.size === 0) {
      this.keepAlive.unref()
      this.holder = null
    }
  }

  // Frees the driver (what runs is canceled); detach: also free every received document.
  close(detach: boolean) {
    if (this.d) {
      lib().tf_driver_free(this.d)
      this.d = null
    }
    cores.delete(this.id)
    clearInterval(this.keepAlive)
    for (const job of this.pending.values()) {
      if (job.inDoc) lib().tf_doc_free(job.inDoc)
      job.reject(new Error('tfetch: the client was closed'))
    }
    this.pending.clear()
    this.holder = null
    if (detach) freeAll(this.docs)
  }
}

const collected = new FinalizationRegistry<Core>((core) => core.close(false))

function trimBase(base: string): string {
  const u = new URL(base)
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`tfetch: not an http(s) URL: ${base}`)
  return `${u.protocol}//${u.host}`
}

function nameOf(name: string): string {
  if (typeof name !== 'string' || !/^[^/?#]+$/.test(name)) throw new TypeError(`tfetch: bad tensor or route name '${name}'`)
  return encodeURIComponent(name)
}

// fn(), or a rejected Promise when it throws (bad arguments reject like failed requests).
function attempt<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn()
  } catch (e) {
    return Promise.reject(e)
  }
}

function asDoc(t: TensorLike | Record<string, TensorLike>): Record<string, TensorLike> {
  const o = t as any
  const single = ArrayBuffer.isView(o) || typeof o?.toFloat32Array === 'function' || o?.data !== undefined
  return single ? { tensor: t as TensorLike } : (t as Record<string, TensorLike>)
}

/** A tfetchd (its base URL, http://host:port) and the settings of the requests made to it. */
export class Client {
  readonly base: string
  private core: Core

  constructor(base: string, opts: ClientOptions = {}) {
    this.base = trimBase(base)
    const L = lib()
    const out = new BigUint64Array(1)
    const st = L.tf_client_new(ptr(out))
    if (st !== TF_OK) throw new Error(`tfetch: cannot make a client: ${L.tf_strerror(st)}`)
    const c = Number(out[0]) as Pointer
    const fail = (what: string, s: number) => {
      L.tf_client_free(c)
      throw new TypeError(`tfetch: ${what}: ${L.tf_strerror(s)}`)
    }
    let s: number
    if (opts.user !== undefined && (s = L.tf_client_set_user(c, cstr(opts.user))) !== TF_OK) fail(`bad user id '${opts.user}'`, s)
    if (opts.token !== undefined && (s = L.tf_client_set_token(c, cstr(opts.token))) !== TF_OK) fail('bad token', s)
    if (opts.transport !== undefined) {
      const t = TRANSPORTS[opts.transport]
      if (!t) fail(`unknown transport '${opts.transport}' (auto, http or ucx)`, -2)
      if ((s = L.tf_client_set_transport(c, t)) !== TF_OK) fail('transport', s)
    }
    if (opts.maxConnections !== undefined && (s = L.tf_client_set_max_connections(c, opts.maxConnections)) !== TF_OK) fail('maxConnections', s)
    if (opts.timeout !== undefined) L.tf_client_set_timeout(c, Math.max(0, Math.ceil(opts.timeout)))
    this.core = new Core(c, this.base)   // owns c from here, also when it throws
    collected.register(this, this.core, this)
  }

  /** The outcome of the last request that completed (its transport, status, ...). */
  get last(): Outcome | null {
    return this.core.last
  }

  /** Requests started and not yet settled. */
  get pending(): number {
    return this.core.pending.size
  }

  /** The tensor stored as `name` (the first of its document), over shared memory when the
   *  server is on this host. */
  get(name: string, o: RequestOptions = {}): Promise<Tensor> {
    return attempt(() => this.core.submit(OP.get, `${this.base}/v1/tensors/${nameOf(name)}`, null, o, false, this))
  }

  /** Every tensor of the document stored as `name`, by tensor name. */
  getAll(name: string, o: RequestOptions = {}): Promise<Record<string, Tensor>> {
    return attempt(() => this.core.submit(OP.get, `${this.base}/v1/tensors/${nameOf(name)}`, null, o, true, this))
  }

  /** Stores a tensor (named "tensor" in the document) or a {name: tensor} record. */
  put(name: string, t: TensorLike | Record<string, TensorLike>, o: RequestOptions = {}): Promise<void> {
    return attempt(() => this.core.submit(OP.put, `${this.base}/v1/tensors/${nameOf(name)}`, asDoc(t), o, false, this))
  }

  /** Sends a tensor to a route (POST /v1/call/ROUTE) and resolves with the first tensor of
   *  its answer (undefined when it answers none). */
  call(route: string, t: TensorLike | Record<string, TensorLike>, o: RequestOptions = {}): Promise<Tensor | undefined> {
    return attempt(() => this.core.submit(OP.exchange, `${this.base}/v1/call/${nameOf(route)}`, asDoc(t), o, false, this))
  }

  /** call, resolving with every tensor of the answer by name. */
  callAll(route: string, t: TensorLike | Record<string, TensorLike>, o: RequestOptions = {}): Promise<Record<string, Tensor>> {
    return attempt(() => this.core.submit(OP.exchange, `${this.base}/v1/call/${nameOf(route)}`, asDoc(t), o, true, this))
  }

  /** Removes the tensor stored as `name`. */
  delete(name: string, o: RequestOptions = {}): Promise<void> {
    return attempt(() => this.core.submit(OP.delete, `${this.base}/v1/tensors/${nameOf(name)}`, null, o, false, this))
  }

  /** Shumai's tfetch against this server: see the package's tfetch(). */
  tfetch(url: string, t?: TensorLike, o: RequestOptions = {}): Promise<Tensor | undefined> {
    let op: number, target: string
    try {
      ({ op, target } = route(url, t !== undefined))
    } catch (e) {
      return Promise.reject(e)
    }
    const opts = { ...o }
    if (t !== undefined && opts.user === undefined) opts.user = provenanceOf(t)
    return this.core.submit(op, target, t === undefined ? null : asDoc(t), opts, false, this)
  }

  /** Cancels what is in flight (those Promises reject), stops the driver and frees every
   *  tensor this client received: their data arrays are detached (length 0). */
  close() {
    collected.unregister(this)
    this.core.close(true)
  }
}

// Shumai's URL (http://h:p/NAME) as tfetchd's native one, so the fast path can carry it:
// without a tensor GET /v1/tensors/NAME, with one POST /v1/call/NAME (an exchange, as
// tfetchd serves Shumai's own POST /NAME). Native URLs (/v1/tensors/..., /v1/call/...) stay.
const routes = new Map<string, { op: number; target: string }>()

function route(url: string, send: boolean): { op: number; target: string } {
  const key = (send ? '>' : '<') + url
  let r = routes.get(key)
  if (!r) {
    r = routeOf(url, send)
    if (routes.size > 1024) routes.clear()
    routes.set(key, r)
  }
  return r
}

function routeOf(url: string, send: boolean): { op: number; target: string } {
  const u = new URL(url)
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`tfetch: not an http(s) URL: ${url}`)
  const base = `${u.protocol}//${u.host}`
  const tail = u.search
  if (u.pathname.startsWith('/v1/tensors/')) return { op: send ? OP.put : OP.get, target: url }
  if (u.pathname.startsWith('/v1/call/')) {
    if (!send) throw new TypeError(`tfetch: ${url} is a route: send it a tensor`)
    return { op: OP.exchange, target: url }
  }
  const name = u.pathname.split('/').filter(Boolean).pop()
  if (!name) throw new TypeError(`tfetch: ${url} names no tensor or route`)
  return send
    ? { op: OP.exchange, target: `${base}/v1/call/${name}${tail}` }
    : { op: OP.get, target: `${base}/v1/tensors/${name}${tail}` }
}

const shared = new Map<string, Client>()

/** The Client tfetch() uses for url's server (one per origin, made on first use). */
const bases = new Map<string, string>()

export function clientFor(url: string): Client {
  let base = bases.get(url)
  if (base === undefined) {
    base = trimBase(url)
    if (bases.size > 1024) bases.clear()
    bases.set(url, base)
  }
  let c = shared.get(base)
  if (!c) {
    c = new Client(base)
    shared.set(base, c)
  }
  return c
}

/**
 * Shumai's tfetch, as a Promise, over libtfetch: `await tfetch(url)` gets the tensor url
 * names, `await tfetch(url, tensor)` sends one and resolves with the answer (an exchange;
 * undefined when the route answers nothing, or for a put to /v1/tensors/NAME). Shumai's URLs
 * (http://host:port/NAME) and tfetchd's (/v1/tensors/NAME, /v1/call/ROUTE) both work; the
 * request travels over shared memory or UCX when the server offers them, else over HTTP
 * (clientFor(url).last.transport says which). A Shumai tensor's provenance travels as
 * Tfetch-User.
 */
export function tfetch(url: string, t?: TensorLike, o: RequestOptions = {}): Promise<Tensor | undefined> {
  let c: Client
  try {
    c = clientFor(url)
  } catch (e) {
    return Promise.reject(e)
  }
  return c.tfetch(url, t, o)
}

// At exit every driver stops first (what is in flight is canceled), so no driver thread
// calls into a runtime that is going away.
process.on('exit', () => {
  for (const core of [...cores.values()]) core.close(false)
})
