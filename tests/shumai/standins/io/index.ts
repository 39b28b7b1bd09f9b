// Stand-in for shumai/io/index.ts: the harness copies Shumai's own io/encode.ts beside this
// file, unmodified; this index re-exports it (the real index also re-exports io/file.ts,
// which the network code does not use).
export * from './encode'
