export { SANDBOX_HOME, SANDBOX_PATH, SANDBOX_SYSTEM_PATHS, bwrapArguments } from './bwrap-arguments.ts';
export type { SandboxHiddenPath, SandboxSpec } from './bwrap-arguments.ts';
export { BWRAP_INSTALL_HINT, bwrapFailure } from './bwrap-failure.ts';
export type { BwrapFailure } from './bwrap-failure.ts';
export { findProgram } from './find-program.ts';
export { STATE_DIRECTORY_NAME, isInside, realExisting, sandboxHiddenPaths } from './hidden-paths.ts';
