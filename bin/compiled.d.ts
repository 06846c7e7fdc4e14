// Types of bin/compiled.js, for the TypeScript that imports it (tests).
export declare const ROOT: string;
export declare const SOURCES: readonly string[];
export declare const BUILD_INFO: string;
export declare function sourceFingerprint(root?: string): { newestMtimeMs: number; files: number };
export declare function compiledCli(root?: string): string | undefined;
