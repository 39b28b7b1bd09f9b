// Stand-in for shumai/module: network/model.ts names Module only as a type.
export class Module {}
