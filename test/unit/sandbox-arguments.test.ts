import { describe, expect, it } from 'vitest';
import { SANDBOX_PATH, bwrapArguments, bwrapFailure, findProgram } from '../../src/sandbox/index.ts';
import { toolsConfigFromEnv } from '../../services/tools/sandbox-config.ts';
import { sandboxStartError } from '../../services/tools/sandbox-launch.ts';

const spec = { workspace: '/srv/ws/acme', cwd: '/srv/ws/acme/src', command: ['git', 'status'], network: false } as const;

/** The values that follow each occurrence of `flag` (one value per flag, or `arity` of them). */
function valuesOf(args: readonly string[], flag: string, arity = 1): string[][] {
  const found: string[][] = [];
  args.forEach((arg, index) => {
    if (arg === flag && index < args.indexOf('--')) found.push(args.slice(index + 1, index + 1 + arity));
  });
  return found;
}

describe('bwrapArguments', () => {
  const args = bwrapArguments(spec);

  it('ends with the command after --, untouched', () => {
    expect(args.slice(args.indexOf('--'))).toEqual(['--', 'git', 'status']);
    expect(bwrapArguments({ ...spec, command: ['sh', '-c', '--bind / /x'] }).slice(-4)).toEqual(['--', 'sh', '-c', '--bind / /x']);
  });

  it('unshares the user (no nested one), PID, IPC, UTS and the network, dies with its parent, starts a new session and drops every capability', () => {
    for (const flag of ['--unshare-user', '--disable-userns', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-net', '--die-with-parent', '--new-session', '--clearenv']) expect(args).toContain(flag);
    expect(valuesOf(args, '--cap-drop')).toEqual([['ALL']]);
    expect(valuesOf(args, '--proc')).toEqual([['/proc']]);
    expect(valuesOf(args, '--tmpfs')).toEqual([['/tmp']]);
  });

  it('keeps the network only when asked to', () => {
    expect(bwrapArguments({ ...spec, network: true })).not.toContain('--unshare-net');
  });

  it('makes the workspace the one writable bind, at its own path, mounted after /tmp and the system paths, and works in cwd', () => {
    expect(valuesOf(args, '--bind', 2)).toEqual([['/srv/ws/acme', '/srv/ws/acme']]);
    expect(args.lastIndexOf('--ro-bind-try')).toBeLessThan(args.indexOf('--bind'));
    expect(args.indexOf('--tmpfs')).toBeLessThan(args.indexOf('--bind'));
    expect(valuesOf(args, '--chdir')).toEqual([['/srv/ws/acme/src']]);
  });

  it('shows system paths read-only and never /home, /root, /etc/shadow, /var or /run', () => {
    const readOnly = valuesOf(args, '--ro-bind-try', 2).map(([from, to]) => {
      expect(from).toBe(to);
      return from!;
    });
    expect(readOnly).toEqual(expect.arrayContaining(['/usr', '/bin', '/lib', '/etc/ld.so.cache', '/etc/alternatives']));
    for (const path of readOnly) expect(path).not.toMatch(/^\/(home|root|var|run|opt|srv|mnt|proc|sys)(\/|$)|^\/etc\/(shadow|gshadow)|^\/etc$/);
    expect(valuesOf(bwrapArguments({ ...spec, readOnlyPaths: ['/opt/node'] }), '--ro-bind-try', 2)).toContainEqual(['/opt/node', '/opt/node']);
  });

  it('covers each hidden path after the workspace bind: a directory with a read-only tmpfs, a file with a read-only /dev/null', () => {
    expect(args).not.toContain('--remount-ro');
    const hiding = bwrapArguments({
      ...spec,
      hiddenPaths: [
        { path: '/srv/ws/acme/.agentbus', kind: 'directory' },
        { path: '/srv/ws/acme/token', kind: 'file' },
      ],
    });
    const bind = hiding.indexOf('--bind');
    expect(hiding.slice(bind, bind + 10)).toEqual([
      '--bind', '/srv/ws/acme', '/srv/ws/acme',
      '--tmpfs', '/srv/ws/acme/.agentbus', '--remount-ro', '/srv/ws/acme/.agentbus',
      '--ro-bind', '/dev/null', '/srv/ws/acme/token',
    ]);
    expect(valuesOf(hiding, '--tmpfs')).toEqual([['/tmp'], ['/srv/ws/acme/.agentbus']]);
    expect(hiding.slice(hiding.indexOf('--'))).toEqual(['--', 'git', 'status']);
  });

  it('sets PATH, HOME and the given variables, and nothing else', () => {
    expect(valuesOf(args, '--setenv', 2)).toEqual([
      ['PATH', SANDBOX_PATH],
      ['HOME', '/tmp'],
    ]);
    expect(valuesOf(bwrapArguments({ ...spec, env: { LANG: 'C.UTF-8' } }), '--setenv', 2).map(([name]) => name)).toEqual(['PATH', 'HOME', 'LANG']);
  });
});

describe("bwrap's own failures", () => {
  it('tells a missing program and a sandbox that cannot start from the command exiting 1', () => {
    expect(bwrapFailure(1, 'bwrap: execvp nope: No such file or directory\n')).toEqual({ kind: 'program_missing', message: 'execvp nope: No such file or directory' });
    expect(bwrapFailure(1, 'bwrap: No permissions to creating new namespace\n')).toMatchObject({ kind: 'setup' });
    expect(bwrapFailure(1, 'grep: x: No such file\n')).toBeUndefined();
    expect(bwrapFailure(2, 'bwrap: execvp nope: No such file or directory\n')).toBeUndefined();
    expect(sandboxStartError(1, 'bwrap: execvp nope: No such file or directory\n', 'nope')).toMatchObject({ code: 'not_found' });
    expect(sandboxStartError(1, 'bwrap: Creating new namespace failed: Operation not permitted\n', 'ls')?.message).toMatch(/user namespaces or CAP_SYS_ADMIN/);
  });
});

describe('findProgram', () => {
  it('finds bwrap on the system PATH here, and not a missing path', async () => {
    expect(await findProgram('bwrap', SANDBOX_PATH)).toMatch(/\/bwrap$/);
    expect(await findProgram('/nonexistent/bwrap', SANDBOX_PATH)).toBeUndefined();
    expect(await findProgram('agentbus-no-such-program', SANDBOX_PATH)).toBeUndefined();
  });
});

describe('toolsConfigFromEnv', () => {
  it('is per tenant and sandboxed without network by default', () => {
    expect(toolsConfigFromEnv({}, '/app')).toEqual({ workspace: '/app', perTenant: true, hide: [], sandbox: { kind: 'bubblewrap', bwrap: 'bwrap', network: false, readOnlyPaths: [] } });
  });

  it('reads the workspace, per-tenant, hidden paths, network, read-only paths and the unsafe opt-out', () => {
    expect(
      toolsConfigFromEnv(
        { AGENTBUS_WORKSPACE: '/ws', AGENTBUS_WORKSPACE_PER_TENANT: '0', AGENTBUS_WORKSPACE_HIDE: '/ws/.state:/srv/x', AGENTBUS_SANDBOX_NETWORK: '1', AGENTBUS_SANDBOX_READ_ONLY: '/opt/a:/nix' },
        '/app',
      ),
    ).toEqual({
      workspace: '/ws',
      perTenant: false,
      hide: ['/ws/.state', '/srv/x'],
      sandbox: { kind: 'bubblewrap', bwrap: 'bwrap', network: true, readOnlyPaths: ['/opt/a', '/nix'] },
    });
    expect(toolsConfigFromEnv({ AGENTBUS_UNSAFE_NO_SANDBOX: 'true', AGENTBUS_WORKSPACE_HIDE: '/ws/.state' }, '/app')).toMatchObject({ hide: ['/ws/.state'], sandbox: { kind: 'none' } });
  });

  it('refuses values it cannot read', () => {
    expect(() => toolsConfigFromEnv({ AGENTBUS_WORKSPACE_PER_TENANT: 'maybe' }, '/app')).toThrow(/AGENTBUS_WORKSPACE_PER_TENANT must be 1 or 0/);
    expect(() => toolsConfigFromEnv({ AGENTBUS_SANDBOX_READ_ONLY: 'relative/dir' }, '/app')).toThrow(/absolute paths/);
    expect(() => toolsConfigFromEnv({ AGENTBUS_WORKSPACE_HIDE: '.agentbus' }, '/app')).toThrow(/AGENTBUS_WORKSPACE_HIDE must list absolute paths/);
  });
});
