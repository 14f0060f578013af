/**
 * The S3 driver (`provcat/drivers/s3`): `s3://bucket/key` on AWS S3 and S3-compatible stores.
 *
 * Importing this module does not load the AWS SDK; the first S3 call does. See
 * docs/drivers/s3.md for configuration, error mapping, multipart behaviour and create modes.
 *
 * @module
 */

// The source errors are the core's (src/core/errors.ts), exported here too for older imports.
export { PartLimitExceeded, SourceChanged, SourceError } from '../../src/core/errors.js';
export {
  type ChecksumSetting,
  type CreateFallback,
  DEFAULT_PART_SIZE,
  DEFAULT_PARTS_IN_FLIGHT,
  DEFAULT_STALL_TIMEOUT_MS,
  MAX_PARTS,
  MAX_PARTS_IN_FLIGHT,
  resolveS3Config,
  type S3Config,
  type S3Credentials,
  type S3StoreOptions,
} from './config.js';
export { PROBE_PREFIX } from './create-mode.js';
export { mapS3Error, type S3ErrorContext, s3UriText } from './errors.js';
export { copySource, decodeListedKey } from './keys.js';
export { S3Multipart } from './multipart.js';
export { type MakeBucketOptions, S3Store } from './s3-store.js';
