import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { JsonSchemaType } from '@modelcontextprotocol/sdk/validation/types.js';
import type { Logger } from '../logging.ts';
import type { JsonSchemaCheck } from '../tool-sdk/index.ts';

/** Makes the argument check of one MCP tool from its input schema, or undefined when the schema does not compile. */
export type ArgumentCheckFactory = (toolName: string, schema: Readonly<Record<string, unknown>>) => JsonSchemaCheck | undefined;

/** ajv's `data/a must be number, data must have required property 'b'` in words about arguments. */
function argumentMessage(message: string): string {
  return message.replace(/(^|, )data(\/)?/g, (_match, lead: string, slash: string | undefined) => `${lead}${slash ? '' : 'arguments'}`);
}

/**
 * Compiles MCP tools' input schemas with the validator the MCP SDK itself uses (ajv with formats), so that bad
 * arguments are answered `invalid_arguments` before they reach the server. A schema's `$schema` is set aside (ajv
 * checks the keywords tool schemas use alike in every draft); a schema ajv cannot compile (a broken `$ref`, …) is logged at warn and left to the server to check.
 * Each tool's schema gets a validator of its own (about 35 KB and half a millisecond): the SDK's validator hands
 * back the schema it compiled first under an `$id`, so two tools whose schemas share one would both be checked
 * against the first, and ajv refuses a second schema that reuses an `$id` inside it.
 */
export function createArgumentChecks(logger: Logger): ArgumentCheckFactory {
  return (toolName, schema) => {
    const validator = new AjvJsonSchemaValidator();
    let validate: (input: unknown) => { valid: boolean; errorMessage?: string | undefined };
    // Without `$schema`: ajv compiles the keywords tool schemas use alike in every draft, and refuses drafts it lacks.
    const { $schema: _draft, ...keywords } = schema;
    try {
      validate = validator.getValidator(keywords as JsonSchemaType);
    } catch (err) {
      logger.warn({ err, tool: toolName }, 'the input schema of an MCP tool does not compile; its server checks the arguments alone');
      return undefined;
    }
    return (input) => {
      const result = validate(input);
      return result.valid ? { valid: true } : { valid: false, errorMessage: argumentMessage(result.errorMessage ?? 'invalid') };
    };
  };
}
