/** How to get bubblewrap, for the messages of a sandbox that cannot run. */
export const BWRAP_INSTALL_HINT = 'install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`)';

/** What a bwrap that exited with its own error (not the command's) says went wrong. */
export type BwrapFailure =
  | { readonly kind: 'program_missing'; readonly message: string }
  | { readonly kind: 'setup'; readonly message: string };

/**
 * Tells bwrap's own failures from the command's: bwrap exits 1 with one `bwrap: …` line when it cannot set the
 * sandbox up (no user namespaces, a bind that fails) or cannot start the program (`bwrap: execvp x: No such file…`).
 * Undefined when the command ran.
 *
 * @example
 * bwrapFailure(1, 'bwrap: execvp nope: No such file or directory\n'); // { kind: 'program_missing', message: 'execvp nope: …' }
 */
export function bwrapFailure(exitCode: number | null, stderr: string): BwrapFailure | undefined {
  if (exitCode !== 1) return undefined;
  const text = stderr.trim();
  if (!text.startsWith('bwrap: ') || text.includes('\n')) return undefined;
  const message = text.slice('bwrap: '.length);
  if (/^execvp .*: (No such file or directory|Permission denied|Not a directory)$/.test(message)) return { kind: 'program_missing', message };
  return { kind: 'setup', message };
}
