// Stand-in for shumai/optim: network/model.ts names OptimizerFn only as a type.
export type OptimizerFn = (tensors: unknown[]) => unknown
