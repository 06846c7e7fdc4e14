/**
 * Replaces every string of a JSON-like value (arrays and plain objects walked, their keys kept) with what `map`
 * makes of it, the strings in parallel. Returns the same value when `map` changed nothing, so a caller can tell.
 * Anything else (numbers, booleans, null, bigints, byte arrays) is kept as it is.
 */
export async function mapStrings(value: unknown, map: (text: string) => Promise<string>): Promise<unknown> {
  if (typeof value === 'string') return map(value);
  if (Array.isArray(value)) {
    const items = await Promise.all(value.map((item) => mapStrings(item, map)));
    return items.every((item, index) => item === value[index]) ? value : items;
  }
  if (!isPlainObject(value)) return value;
  const entries = Object.entries(value);
  const mapped = await Promise.all(entries.map(([, item]) => mapStrings(item, map)));
  if (mapped.every((item, index) => item === entries[index]![1])) return value;
  return Object.fromEntries(entries.map(([key], index) => [key, mapped[index]]));
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
