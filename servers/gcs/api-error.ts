/**
 * Errors the test server answers, in the two shapes GCS uses.
 *
 * JSON API (cloud.google.com/storage/docs/json_api/v1/status-codes):
 * `{"error":{"code":404,"message":"...","errors":[{"domain":"global","reason":"notFound",
 * "message":"..."}]}}` with the same HTTP status; the SDK turns it into an ApiError whose `code`
 * is the status and whose `errors[0].reason` is the reason.
 *
 * XML API (signed URLs; cloud.google.com/storage/docs/xml-api/reference-status):
 * `<Error><Code>SignatureDoesNotMatch</Code><Message>...</Message><Details>...</Details></Error>`.
 *
 * Handlers throw {@link ApiError}; the dispatcher renders it in the shape of the route.
 *
 * @module
 */

/** A failure with the HTTP status and the GCS reason (JSON) or code (XML) to answer. */
export class ApiError extends Error {
  /** HTTP status answered. */
  readonly status: number;
  /** JSON `errors[0].reason`, e.g. `notFound`, `conditionNotMet`, `forbidden`. */
  readonly reason: string;
  /** XML `<Code>` for the XML-API routes, e.g. `NoSuchKey`; defaults from the status. */
  readonly xmlCode: string | undefined;
  /** XML `<Details>`, when GCS gives one. */
  readonly details: string | undefined;
  /** Extra response headers (e.g. `Content-Range: bytes *\/SIZE` on a 416). */
  readonly headers: Readonly<Record<string, string>>;

  constructor(
    status: number,
    reason: string,
    message: string,
    extra: { xmlCode?: string; details?: string; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.reason = reason;
    this.xmlCode = extra.xmlCode;
    this.details = extra.details;
    this.headers = extra.headers ?? {};
  }

  /** The JSON API body. */
  json(): string {
    return JSON.stringify({
      error: {
        code: this.status,
        message: this.message,
        errors: [{ domain: 'global', reason: this.reason, message: this.message }],
      },
    });
  }

  /** The XML API body. */
  xml(): string {
    const code = this.xmlCode ?? XML_CODES[this.status] ?? 'InternalError';
    const details =
      this.details === undefined ? '' : `<Details>${escapeXml(this.details)}</Details>`;
    return `<?xml version='1.0' encoding='UTF-8'?><Error><Code>${code}</Code><Message>${escapeXml(this.message)}</Message>${details}</Error>`;
  }
}

const XML_CODES: Record<number, string> = {
  400: 'InvalidArgument',
  401: 'AuthenticationRequired',
  403: 'AccessDenied',
  404: 'NoSuchKey',
  412: 'PreconditionFailed',
  416: 'InvalidRange',
  503: 'ServiceUnavailable',
};

function escapeXml(text: string): string {
  return text.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** 404 for a missing bucket, worded as GCS words it. */
export function noSuchBucket(bucket: string): ApiError {
  return new ApiError(404, 'notFound', 'The specified bucket does not exist.', {
    xmlCode: 'NoSuchBucket',
    details: `No such bucket: ${bucket}`,
  });
}

/** 404 for a missing object (or generation), worded as GCS words it. */
export function noSuchObject(bucket: string, name: string, generation?: string): ApiError {
  const which = generation === undefined ? `${bucket}/${name}` : `${bucket}/${name}#${generation}`;
  return new ApiError(404, 'notFound', `No such object: ${which}`, {
    xmlCode: 'NoSuchKey',
    details: `No such object: ${which}`,
  });
}

/** 412: a precondition did not hold. */
export function conditionNotMet(): ApiError {
  return new ApiError(
    412,
    'conditionNotMet',
    'At least one of the pre-conditions you specified did not hold.',
    { xmlCode: 'PreconditionFailed' },
  );
}

/** 400 with reason `invalid` (or another reason). */
export function invalid(message: string, reason = 'invalid'): ApiError {
  return new ApiError(400, reason, message);
}
