export { createScrubber } from './scrubber.ts';
export type { ScrubbedValue, Scrubber, ScrubberOptions } from './scrubber.ts';
export { headerSecrets, secretsFromEnv, MIN_CONFIGURED_SECRET_LENGTH } from './configured-secrets.ts';
export { REDACTED_PREFIX, redactionMarker } from './findings.ts';
export { HIGH_ENTROPY_RULE, isHighEntropySecret, shannonEntropy } from './high-entropy.ts';
