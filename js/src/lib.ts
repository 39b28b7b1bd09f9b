// lib.ts - the bun:ffi binding of libtfetch (client/tfetch.h): finding and loading
// libtfetch.so.1, the layouts of the structs it shares with callers, and the functions the
// package calls.
//
// Which library is loaded, in order: the file named by $TFETCH_LIBRARY (the tests point it at
// the build tree's client/.libs/libtfetch.so.1), the one in the libdir pkg-config reports for
// `tfetch` (an installed libtfetch), then whatever the dynamic loader finds as
// libtfetch.so.1. The same order as the Python package (python/tfetch/_lib.py). Loaded once,
// on first use; nothing else is kept here. Bun's JS thread only.
import { CString, dlopen, FFIType, read, type Pointer } from 'bun:ffi'

export const TF_OK = 0
export const TF_EAGAIN = -38
export const TF_BORROW = 1
export const TF_DRIVER_INLINE = 1
export const OP = { get: 1, put: 2, delete: 3, exchange: 4 } as const
export const TRANSPORTS = { auto: 1, http: 2, ucx: 3 } as const
export const FORMAT_SAFETENSORS = 1

// Layouts (LP64: x86-64, aarch64), held to the C compiler by tests/check_driver.c
// (driver_struct_layout_js).
export const REQUEST = {
  size: 80, op: 8, url: 16, in: 24, wait_ms: 32, timeout_ms: 40, format: 48,
  request_id: 56, transport: 64, user: 72
} as const
export const RESULT = {
  status: 0, http_status: 4, request_id: 8, transport: 137, op: 169, bytes_sent: 192,
  bytes_received: 200, seconds: 208, error: 216, fallback: 472
} as const
export const COMPLETION = { size: 664, tag: 8, status: 16, doc: 24, result: 32 } as const
export const TENSOR = { name: 0, dtype: 8, rank: 12, shape: 16, data: 80, nbytes: 88 } as const

const symbols = {
  tf_version: { args: [], returns: FFIType.cstring },
  tf_strerror: { args: [FFIType.i32], returns: FFIType.cstring },
  tf_err_name: { args: [FFIType.i32], returns: FFIType.cstring },
  tf_dtype_from_name: { args: [FFIType.cstring, FFIType.ptr], returns: FFIType.i32 },
  tf_client_new: { args: [FFIType.ptr], returns: FFIType.i32 },
  tf_client_free: { args: [FFIType.ptr], returns: FFIType.void },
  tf_client_set_user: { args: [FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  tf_client_set_token: { args: [FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  tf_client_set_timeout: { args: [FFIType.ptr, FFIType.i64], returns: FFIType.void },
  tf_client_set_transport: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  tf_client_set_max_connections: { args: [FFIType.ptr, FFIType.i64], returns: FFIType.i32 },
  tf_driver_new: { args: [FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  tf_driver_submit: { args: [FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.u32], returns: FFIType.i32 },
  tf_driver_reap: { args: [FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  tf_driver_free: { args: [FFIType.ptr], returns: FFIType.void },
  tf_doc_new: { args: [], returns: FFIType.ptr },
  tf_doc_free: { args: [FFIType.ptr], returns: FFIType.void },
  tf_doc_add: {
    args: [FFIType.ptr, FFIType.ptr, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.ptr,
      FFIType.u64, FFIType.u32],
    returns: FFIType.i32
  },
  tf_doc_count: { args: [FFIType.ptr], returns: FFIType.u64_fast },
  tf_doc_at: { args: [FFIType.ptr, FFIType.u64], returns: FFIType.ptr }
} as const

function candidates(): string[] {
  const env = process.env.TFETCH_LIBRARY
  if (env) return [env]
  const out: string[] = []
  try {
    const r = Bun.spawnSync(['pkg-config', '--variable=libdir', 'tfetch'], { stderr: 'ignore' })
    const dir = r.success ? r.stdout.toString().trim() : ''
    if (dir) out.push(`${dir}/libtfetch.so.1`)
  } catch {
    // no pkg-config: the loader's search alone
  }
  out.push('libtfetch.so.1')
  return out
}

type Lib = ReturnType<typeof dlopen<typeof symbols>>['symbols']
let loaded: Lib | null = null
export let libraryPath = ''

// The loaded library's functions; throws, naming every place tried, when none loads.
export function lib(): Lib {
  if (loaded) return loaded
  const errors: string[] = []
  for (const path of candidates()) {
    try {
      loaded = dlopen(path, symbols).symbols
      libraryPath = path
      return loaded
    } catch (e) {
      errors.push(`${path}: ${(e as Error).message}`)
    }
  }
  throw new Error(`tfetch: cannot load libtfetch (set TFETCH_LIBRARY): ${errors.join('; ')}`)
}

// A NUL-terminated copy of s for a `const char *` argument (kept alive by the caller).
export function cstr(s: string): Buffer {
  return Buffer.from(s + '\0', 'utf8')
}

// The NUL-terminated string in a char array at p + off ("" when empty).
export function fixedString(p: Pointer, off: number): string {
  return read.u8(p, off) === 0 ? "" : new CString(p, off).toString()
}
