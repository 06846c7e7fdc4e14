/**
 * System paths a sandboxed command sees, read-only: the programs and libraries, and the few files of `/etc` that
 * programs need to start (the dynamic linker's cache, Debian's alternatives, users and groups, time zone, TLS roots,
 * name resolution). Missing ones are skipped (`--ro-bind-try`). `/etc/shadow`, `/home`, `/root`, `/var`, `/run`,
 * `/srv`, `/opt`, `/mnt` and the rest are absent.
 */
export const SANDBOX_SYSTEM_PATHS = [
  '/usr',
  '/bin',
  '/sbin',
  '/lib',
  '/lib32',
  '/lib64',
  '/libx32',
  '/etc/alternatives',
  '/etc/ld.so.cache',
  '/etc/ld.so.conf',
  '/etc/ld.so.conf.d',
  '/etc/localtime',
  '/etc/passwd',
  '/etc/group',
  '/etc/nsswitch.conf',
  '/etc/hosts',
  '/etc/resolv.conf',
  '/etc/ssl',
  '/etc/ca-certificates',
] as const;

/** The `PATH` inside the sandbox. */
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Where the sandbox's `HOME` is: its own fresh `/tmp`, so nothing a command keeps there outlives it. */
export const SANDBOX_HOME = '/tmp';

/** A path inside the workspace that a sandboxed command may neither read nor change, and what is there on the host. */
export interface SandboxHiddenPath {
  /** Absolute and symlink-free, inside the workspace, existing on the host (nothing is made for it). */
  readonly path: string;
  /** A directory is covered with an empty read-only tmpfs; anything else with a read-only `/dev/null`. */
  readonly kind: 'directory' | 'file';
}

/** What one sandboxed run looks like. */
export interface SandboxSpec {
  /** The one writable directory (an absolute, symlink-free path), mounted at the same path inside. */
  readonly workspace: string;
  /** The working directory of the command, inside `workspace` (absolute). */
  readonly cwd: string;
  /** Program and arguments; a bare name is looked up on {@link SANDBOX_PATH} inside the sandbox. */
  readonly command: readonly string[];
  /** Share the host's network; otherwise the sandbox has only its own, unconnected loopback. */
  readonly network: boolean;
  /** The command's whole environment (besides `PATH` and `HOME`, which the sandbox sets unless given here). */
  readonly env?: Readonly<Record<string, string>>;
  /** More absolute paths to show read-only (a Node installed under `/opt`, a `node_modules` elsewhere). */
  readonly readOnlyPaths?: readonly string[];
  /** Paths inside the workspace to cover, so that commands can neither read nor write them (the stack's `.agentbus`). */
  readonly hiddenPaths?: readonly SandboxHiddenPath[];
}

/**
 * The arguments of `bwrap` that run `spec.command` in a sandbox: its own user (which may make no nested one), PID, IPC,
 * UTS and (unless `network`) network namespaces with its own `/proc`, `/dev` and a fresh `/tmp`; the system paths read-only, the workspace the only
 * writable place; every capability dropped; a new session (no terminal injection); killed when its parent dies;
 * an environment of `PATH`, `HOME` and what `env` names, nothing inherited. Pure: nothing is checked on disk.
 *
 * Mounts are applied in order, so the workspace bind comes after the system paths and `/tmp` (it may lie under one of
 * them), and the hidden paths after the workspace: each is covered with an empty tmpfs made read-only (a directory)
 * or a read-only `/dev/null` (a file). bwrap makes a missing mount point, so only existing paths may be hidden.
 *
 * @example
 * spawn('/usr/bin/bwrap', bwrapArguments({ workspace: '/srv/ws/acme', cwd: '/srv/ws/acme', command: ['ls'], network: false }), { env: {} });
 */
export function bwrapArguments(spec: SandboxSpec): string[] {
  const args: string[] = [];
  for (const path of SANDBOX_SYSTEM_PATHS) args.push('--ro-bind-try', path, path);
  for (const path of spec.readOnlyPaths ?? []) args.push('--ro-bind-try', path, path);
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp');
  args.push('--bind', spec.workspace, spec.workspace);
  for (const hidden of spec.hiddenPaths ?? []) {
    if (hidden.kind === 'directory') args.push('--tmpfs', hidden.path, '--remount-ro', hidden.path);
    else args.push('--ro-bind', '/dev/null', hidden.path);
  }
  args.push('--chdir', spec.cwd);
  // A user namespace of its own, in which no further one can be made: otherwise `unshare -Ur` inside gives a full set
  // of capabilities in a new namespace (kernel attack surface). The worker's uid and gid map to themselves, so files
  // written in the workspace stay the worker's on the host.
  args.push('--unshare-user', '--disable-userns');
  args.push('--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try');
  if (!spec.network) args.push('--unshare-net');
  args.push('--hostname', 'sandbox', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--clearenv');
  const env: Record<string, string> = { PATH: SANDBOX_PATH, HOME: SANDBOX_HOME, ...spec.env };
  for (const [name, value] of Object.entries(env)) args.push('--setenv', name, value);
  args.push('--', ...spec.command);
  return args;
}
