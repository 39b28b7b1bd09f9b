// index.ts - tfetch for Bun: Shumai's tfetch(url[, tensor]) and a Client, as Promises, over
// libtfetch (bun:ffi; no native addon). Requests go over same-host shared memory or UCX when
// the server offers them, else HTTP, and say which (client.last.transport). See README.md.
export { Client, clientFor, tfetch, TfetchError } from './src/client'
export type { ClientOptions, Outcome, RequestOptions } from './src/client'
export { DTYPES } from './src/tensor'
export type { DType, Tensor, TensorLike } from './src/tensor'
