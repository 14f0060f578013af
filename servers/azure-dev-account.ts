/**
 * The Azure Storage development account, shared by Azurite and the project's versions server.
 *
 * Both test servers accept exactly this account and key (Microsoft documents them for the
 * storage emulators), so a test, a driver under test or a developer's tool configured for one
 * works against the other by changing only the endpoint.
 *
 * @module
 */

/** The development account's name. */
export const DEV_ACCOUNT_NAME = 'devstoreaccount1';

/** The development account's well-known key (public, documented by Microsoft; not a secret). */
export const DEV_ACCOUNT_KEY =
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

/**
 * The blob endpoint of a path-style server on `host:port`: `http://host:port/devstoreaccount1`
 * (no trailing slash; the SDK appends `/container/blob`).
 */
export function devBlobEndpoint(port: number, host = '127.0.0.1'): string {
  return `http://${host}:${port}/${DEV_ACCOUNT_NAME}`;
}

/**
 * A connection string for the development account whose `BlobEndpoint` is `blobEndpoint`, in the
 * form `BlobServiceClient.fromConnectionString` and `AZURE_STORAGE_CONNECTION_STRING` take.
 */
export function devConnectionString(blobEndpoint: string): string {
  return (
    `DefaultEndpointsProtocol=http;AccountName=${DEV_ACCOUNT_NAME};` +
    `AccountKey=${DEV_ACCOUNT_KEY};BlobEndpoint=${blobEndpoint};`
  );
}
