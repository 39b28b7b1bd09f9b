// tfetch.test.ts - the Bun package (js/, over libtfetch) against a real tfetchd, under
// `bun test`; tests/js.test starts the daemon and sets TFETCH_URL, TFETCH_LIBRARY,
// TFETCH_JS_DIR (the package) and TFETCH_SHUMAI_DIR (Shumai's own client code laid out by
// tests/shumai/setup.sh).
import { afterAll, describe, expect, test } from 'bun:test'

const base = process.env.TFETCH_URL!
const pkg = await import(`${process.env.TFETCH_JS_DIR}/index.ts`)
const { Client, DTYPES, TfetchError, clientFor, tfetch } = pkg
const shumaiDir = process.env.TFETCH_SHUMAI_DIR!
const shumai = await import(`${shumaiDir}/shumai/network/tensor.ts`)
const sm = await import(`${shumaiDir}/shumai/tensor/index.ts`)

const info = await (await fetch(`${base}/v1/info`)).json()
const fastPath = info.transports.includes('ucx')

const BITS: Record<string, number> = {
  F64: 64, F32: 32, F16: 16, BF16: 16, I64: 64, I32: 32, I16: 16, U64: 64, U32: 32, U16: 16,
  C64: 64, F4: 4, F6_E2M3: 6, F6_E3M2: 6
}

function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
}

function pattern(n: number, seed: number): Uint8Array {
  return new Uint8Array(n).map((_, i) => (i * 131 + seed * 7 + 3) & 0xff)
}

const clients: any[] = []
function client(opts: Record<string, unknown> = {}) {
  const c = new Client(base, opts)
  clients.push(c)
  return c
}
afterAll(() => clients.forEach((c) => c.close()))

describe('every dtype round-trips', () => {
  const c = client({ user: 'js-dtypes' })
  for (const dt of DTYPES as string[]) {
    test(dt, async () => {
      const shape = [3, 4]
      const data = pattern(Math.ceil((12 * (BITS[dt] ?? 8)) / 8), dt.length)
      await c.put(`js_${dt}`, { dtype: dt, shape, data })
      expect(c.last.status).toBe(0)
      for (const t of [await c.get(`js_${dt}`), await c.call('echo', { dtype: dt, shape, data })]) {
        expect(t.dtype).toBe(dt)
        expect(t.shape).toEqual(shape)
        expect(Array.from(bytesOf(t.data))).toEqual(Array.from(data))
      }
    })
  }
  test('typed views: F32 floats, I64 bigints, BF16/FP8 raw bits, F16', async () => {
    const f = await c.call('echo', Float32Array.of(1.5, -2, 2 ** 100))
    expect(f.data).toBeInstanceOf(Float32Array)
    expect(Array.from(f.data)).toEqual([1.5, -2, 2 ** 100])
    const i = await c.call('echo', BigInt64Array.of(-5n, 1n << 62n))
    expect(i.dtype).toBe('I64')
    expect(Array.from(i.data)).toEqual([-5n, 1n << 62n])
    const b = await c.call('echo', { dtype: 'BF16', shape: [2], data: Uint16Array.of(0x3f80, 0xc000) })
    expect(b.data).toBeInstanceOf(Uint16Array)
    expect(Array.from(b.data)).toEqual([0x3f80, 0xc000])
    const e = await c.call('echo', { dtype: 'F8_E4M3', shape: [1, 3], data: [0x38, 0x40, 0xb8] })
    expect(e.data).toBeInstanceOf(Uint8Array)
    expect(Array.from(e.data)).toEqual([0x38, 0x40, 0xb8])
    expect(e.shape).toEqual([1, 3])
    if ((globalThis as any).Float16Array) {
      const h = await c.call('echo', { dtype: 'F16', shape: [2], data: Uint16Array.of(0x3c00, 0x4000) })
      expect(Array.from(h.data)).toEqual([1, 2])
    }
  })
  test('a scalar, an empty tensor, several tensors in one document', async () => {
    const s = await c.call('echo', { dtype: 'F64', shape: [], data: Float64Array.of(7) })
    expect(s.shape).toEqual([])
    expect(Array.from(s.data)).toEqual([7])
    const z = await c.call('echo', { dtype: 'F32', shape: [4, 0], data: new Float32Array(0) })
    expect(z.shape).toEqual([4, 0])
    expect(z.data.length).toBe(0)
    const all = await c.callAll('echo', { a: Int32Array.of(1, 2), b: { dtype: 'U8', shape: [1], data: [9] } })
    expect(Object.keys(all).sort()).toEqual(['a', 'b'])
    expect(Array.from(all.a.data)).toEqual([1, 2])
    expect(Array.from(all.b.data)).toEqual([9])
  })
  test('bad tensors and names reject before anything is sent', async () => {
    await expect(c.put('x', { dtype: 'F32', shape: [3], data: new Float32Array(2) })).rejects.toThrow(/needs 12 bytes/)
    await expect(c.put('x', { dtype: 'Q7', data: new Uint8Array(1) })).rejects.toThrow(/unknown dtype/)
    await expect(c.put('x', 'nonsense')).rejects.toThrow()
    await expect(c.get('a/b')).rejects.toThrow(/bad tensor or route name/)
    await expect(tfetch('ftp://x/y')).rejects.toThrow(/http/)
    await expect(tfetch(`${base}/v1/call/echo`)).rejects.toThrow(/send it a tensor/)
    expect(c.pending).toBe(0)
  })
})

describe('Shumai tensors, provenance and per-user state', () => {
  test('a Shumai tensor goes in as F32 with its shape', async () => {
    const t = sm.tensor(Float32Array.of(1, 2, 3, 4, 5, 6)).reshape([2, 3])
    const r = await tfetch(`${base}/echo`, t)
    expect(r.dtype).toBe('F32')
    expect(r.shape).toEqual([2, 3])
    expect(Array.from(r.data)).toEqual([1, 2, 3, 4, 5, 6])
  })
  test('Tfetch-User keeps two users apart, and provenance travels as it', async () => {
    const alice = client({ user: 'js-alice' })
    const bob = client({ user: 'js-bob' })
    const one = Float32Array.of(1)
    expect(Array.from((await alice.call('accumulate', one)).data)).toEqual([1])
    expect(Array.from((await bob.call('accumulate', Float32Array.of(10))).data)).toEqual([10])
    expect(Array.from((await alice.call('accumulate', one)).data)).toEqual([2])
    expect(Array.from((await alice.call('accumulate', one, { user: 'js-carol' })).data)).toEqual([1])
    // A Shumai tensor's provenance is its user id: ours and Shumai's own client share state.
    const id = (0x10000000 + Math.floor(Math.random() * 0x0fffffff)).toString(16)
    const t = sm.tensor(Float32Array.of(5))
    t.provenance = id
    expect(Array.from((await tfetch(`${base}/accumulate`, t)).data)).toEqual([5])
    const theirs = await shumai.tfetch(`${base}/accumulate`, t)
    expect(Array.from(theirs.toFloat32Array())).toEqual([10])
    expect(Array.from((await tfetch(`${base}/accumulate`, t)).data)).toEqual([15])
  })
})

describe('concurrency', () => {
  test('1,000 requests in flight on one client', async () => {
    const c = client({ user: 'js-many' })
    const sent = Array.from({ length: 1000 }, (_, i) => Float32Array.from({ length: 1 + (i % 16) }, (_, k) => i * 100 + k))
    const ps = sent.map((a) => c.call('echo', a))
    expect(c.pending).toBe(1000)
    const got = await Promise.all(ps)
    got.forEach((r: any, i: number) => expect(Array.from(r.data)).toEqual(Array.from(sent[i])))
    expect(c.pending).toBe(0)
  })
  test('gets, puts and calls interleaved, each its own Promise', async () => {
    const c = client()
    const puts = Array.from({ length: 50 }, (_, i) => c.put(`js_mix_${i}`, Int32Array.of(i, -i - 1)))
    await Promise.all(puts)
    const gets = Array.from({ length: 50 }, (_, i) => c.get(`js_mix_${i}`))
    const calls = Array.from({ length: 50 }, (_, i) => c.call('echo', Int16Array.of(i)))
    const [g, k] = await Promise.all([Promise.all(gets), Promise.all(calls)])
    g.forEach((t: any, i: number) => expect(Array.from(t.data)).toEqual([i, -i - 1]))
    k.forEach((t: any, i: number) => expect(Array.from(t.data)).toEqual([i]))
  })
})

describe('errors reject with the tfetch status, the HTTP status and the message', () => {
  const c = client()
  test('no such tensor', async () => {
    const e = await c.get('js_never_stored').catch((x: unknown) => x)
    expect(e).toBeInstanceOf(TfetchError)
    expect(e.code).toBe('TF_ENOTFOUND')
    expect(e.status).toBeLessThan(0)
    expect(e.httpStatus).toBe(404)
    expect(e.message).toContain('js_never_stored')
  })
  test('no such route, and a route that refuses the tensor', async () => {
    const e = await c.call('js_no_route', Float32Array.of(1)).catch((x: unknown) => x)
    expect(e.httpStatus).toBe(404)
    const r = await c.call('accumulate', { dtype: 'BF16', shape: [1], data: Uint16Array.of(1) }).catch((x: unknown) => x)
    expect(r).toBeInstanceOf(TfetchError)
    expect(r.httpStatus).toBe(422)
    expect(r.message).toContain('accumulate')
  })
  test('nothing listening', async () => {
    const srv = Bun.serve({ port: 0, fetch: () => new Response('') })
    const port = srv.port
    srv.stop(true)
    const e = await new Client(`http://127.0.0.1:${port}`).get('x').catch((x: unknown) => x)
    expect(e.code).toBe('TF_ECONNECT')
    expect(e.httpStatus).toBe(0)
  })
  test('a long-poll waits, then answers 404; a server that never answers times out', async () => {
    const t0 = performance.now()
    const e = await c.get('js_late', { wait: 200 }).catch((x: unknown) => x)
    expect(e.code).toBe('TF_ENOTFOUND')
    expect(performance.now() - t0).toBeGreaterThan(150)
    const mute = Bun.serve({ port: 0, fetch: () => new Promise<Response>(() => {}) })
    const m = new Client(`http://127.0.0.1:${mute.port}`, { timeout: 300 })
    const t = await m.get('x').catch((x: unknown) => x)
    m.close()
    mute.stop(true)
    expect(t).toBeInstanceOf(TfetchError)
    expect(t.code).toBe('TF_ETIMEDOUT')
  })
  test('bad settings throw at once', () => {
    expect(() => new Client(base, { user: 'no spaces' })).toThrow(/user id/)
    expect(() => new Client(base, { transport: 'carrier-pigeon' })).toThrow(/transport/)
    expect(() => new Client('ftp://x')).toThrow(/http/)
  })
})

describe('transports', () => {
  test.skipIf(!fastPath)('a same-host get and a large call go over shared memory, a small call over UCX: never HTTP', async () => {
    const c = client()
    const big = new Float32Array(1 << 18).map((_, i) => i)
    await c.put('js_big', big)
    const t = await c.get('js_big')
    expect(c.last.transport).not.toBe('http')
    expect(c.last.transport).toMatch(/^(shm\/|ucx\/)/)
    expect(c.last.fallback).toBe('')
    expect(t.data[12345]).toBe(12345)
    const r = await c.call('echo', big)                     // 1 MiB: CALL over the shm socket
    expect(c.last.transport).toBe('shm/memfd')
    expect(c.last.fallback).toBe('')
    expect(r.data[(1 << 18) - 1]).toBe((1 << 18) - 1)
    const huge = new Float32Array(1 << 22).map((_, i) => i)  // 16 MiB, as bench/shumai's
    const h = await c.call('echo', huge)
    expect(c.last.transport).toBe('shm/memfd')
    expect(h.data.length).toBe(1 << 22)
    expect(h.data[(1 << 22) - 1]).toBe((1 << 22) - 1)
    const g = await tfetch(`${base}/js_big`)               // Shumai's URLs take it too
    expect(clientFor(base).last.transport).not.toBe('http')
    expect(g.data.length).toBe(1 << 18)
    const e = await tfetch(`${base}/echo`, sm.tensor(Float32Array.of(4, 5)))
    expect(clientFor(base).last.transport).toMatch(/^ucx\//)
    expect(Array.from(e.data)).toEqual([4, 5])
  })
  test('policy http stays on HTTP and says so', async () => {
    const c = client({ transport: 'http' })
    await c.call('echo', Float32Array.of(1))
    expect(c.last.transport).toBe('http')
  })
})

describe('received tensors are views over the received buffer', () => {
  test('close() frees them: their arrays are detached, what is in flight rejects', async () => {
    const c = new Client(base)
    await c.put('js_view', Float64Array.of(1, 2, 3))
    const t = await c.get('js_view')
    expect(t.data.length).toBe(3)
    const pending = c.call('echo', Float32Array.of(1)).then(() => 'resolved', (e: Error) => e.message)
    c.close()
    expect(t.data.length).toBe(0)               // detached: it was the library's memory
    expect(t.data.buffer.byteLength).toBe(0)
    expect(['resolved', 'tfetch: the client was closed']).toContain(await pending)
    await expect(c.get('js_view')).rejects.toThrow(/closed/)
  })
  test('a Client that is garbage-collected stops its driver (its threads end)', async () => {
    const threads = () => require('fs').readdirSync('/proc/self/task').length
    const settle = async () => {
      for (let i = 0; i < 10; i++) {
        Bun.gc(true)
        await Bun.sleep(20)
      }
    }
    await settle()
    const before = threads()
    const n = 8
    // made, used and dropped (never closed) in a function of their own: an async function's
    // locals live in its heap frame while it runs
    const use = async () => {
      const held: unknown[] = []
      for (let i = 0; i < n; i++) {
        const c = new Client(base)
        await c.call('echo', Float32Array.of(i))
        held.push(c)
      }
      return threads()
    }
    const during = await use()
    expect(during).toBeGreaterThanOrEqual(before + n)          // a driver thread each, at least
    await settle()
    // JSC scans the stack conservatively: one may survive a while, not all of them
    expect(threads()).toBeLessThanOrEqual(before + (during - before) / n)
  })
  test('a collected tensor frees its document (no growth over many gets)', async () => {
    const c = client()
    await c.put('js_gc', new Uint8Array(1 << 20))
    for (let i = 0; i < 200; i++) await c.get('js_gc')
    Bun.gc(true)
    await Bun.sleep(10)
    Bun.gc(true)
    const held = (c as any).core.docs.size
    expect(held).toBeLessThan(200)
  })
  test.skipIf(!fastPath)('replies dropped in a loop that never yields are freed as it goes', async () => {
    // Each call completes inline (shm), so the loop runs on microtasks alone: the registry's
    // callbacks that free dropped replies need the event loop to turn, which the package
    // gives it once it asked for a collection. Without that every reply stays held.
    const c = client()
    const body = new Float32Array(1 << 20).map((_, i) => i)    // 4 MiB: CALL over shm
    await c.call('echo', body)
    const n = 64
    let most = 0
    for (let i = 0; i < n; i++) {
      const r = await c.call('echo', body)
      expect(r.data.length).toBe(1 << 20)
      most = Math.max(most, (c as any).core.docs.size)
    }
    expect(c.last.transport).toBe('shm/memfd')
    expect(most).toBeLessThan(n / 2)
  })
})

describe("Shumai's own tfetch against the same server", () => {
  test('the same answers as this package, GET and exchange', async () => {
    const t = sm.tensor(Float32Array.of(0.5, -1, 2.25, 3)).reshape([2, 2])
    const theirs = await shumai.tfetch(`${base}/echo`, t)
    const ours = await tfetch(`${base}/echo`, t)
    expect(Array.from(ours.data)).toEqual(Array.from(theirs.toFloat32Array()))
    expect(ours.shape).toEqual(theirs.shape.map(Number))
    await tfetch(`${base}/v1/tensors/js_shared`, t)            // a put, through this package
    const g = await shumai.tfetch(`${base}/js_shared`)
    expect(Array.from(g.toFloat32Array())).toEqual([0.5, -1, 2.25, 3])
    const mine = await tfetch(`${base}/js_shared`)
    expect(Array.from(mine.data)).toEqual([0.5, -1, 2.25, 3])
  })
})
