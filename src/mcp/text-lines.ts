import type { Readable } from 'node:stream';

/** The longest line handed on whole; a longer one comes in pieces of this many characters. */
export const MAX_LINE_LENGTH = 16_384;

/**
 * Calls `onLine` with each line of the text `stream` carries, without its line ending (`\n` or `\r\n`), and with what
 * is left when the stream ends. A line longer than `maxLength` comes in pieces, so that a stream with no line ending
 * is not kept whole in memory. An error of `onLine` is handed to `onError`, and the lines go on.
 *
 * @example
 * forEachLine(child.stderr, (line) => process.stderr.write(`[server] ${line}\n`));
 */
export function forEachLine(stream: Readable, onLine: (line: string) => void, options: { maxLength?: number; onError?: (error: unknown) => void } = {}): void {
  const maxLength = options.maxLength ?? MAX_LINE_LENGTH;
  let buffered = '';
  const emit = (line: string) => {
    try {
      onLine(line.endsWith('\r') ? line.slice(0, -1) : line);
    } catch (error) {
      options.onError?.(error);
    }
  };
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    buffered += chunk;
    for (let newline = buffered.indexOf('\n'); newline >= 0; newline = buffered.indexOf('\n')) {
      emit(buffered.slice(0, newline));
      buffered = buffered.slice(newline + 1);
    }
    while (buffered.length >= maxLength) {
      emit(buffered.slice(0, maxLength));
      buffered = buffered.slice(maxLength);
    }
  });
  stream.on('end', () => {
    if (buffered) emit(buffered);
    buffered = '';
  });
}
