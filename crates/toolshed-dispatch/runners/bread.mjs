// `@breadai/core` as toolshed runs it: defineTool and defineHumanTool, mapped onto
// toolshed's spec (see compat.mjs). Credential providers are toolshed's own (the run's
// provider, or the environment), so `credentialProvider`, envProvider and
// vaultProvider are refused with what to do instead.

import { COMPAT, CompatError, checkSchema, kindOf, onlyKnown } from './compat.mjs';

const FRAMEWORK = 'bread';
const FIELDS = [
  'name',
  'description',
  'schema',
  'outputSchema',
  'credentials',
  'hooks',
  'errorHandling',
  'execute',
];
const HINTS = {
  credentialProvider:
    "cannot be mapped: toolshed resolves credentials with the run's provider (the environment, or Vault configured in toolshed), so remove it",
  inputSchema: 'is not a bread field: bread names the input schema `schema`',
};
const HOOKS = ['beforeRun', 'afterRun', 'onError'];

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

function checkName(name) {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new CompatError(FRAMEWORK, name, 'name', 'must be a string of letters, digits, `_` and `-` (1 to 64)');
  }
}

/** bread's defineTool, checked and branded for toolshed. */
export function defineTool(def) {
  if (def === null || typeof def !== 'object') {
    throw new CompatError(FRAMEWORK, undefined, 'defineTool', 'needs an object {name, description, schema, execute}');
  }
  checkName(def.name);
  const tool = def.name;
  onlyKnown(FRAMEWORK, tool, '', def, FIELDS, HINTS);
  if (def.description !== undefined && typeof def.description !== 'string') {
    throw new CompatError(FRAMEWORK, tool, 'description', 'must be a string');
  }
  checkSchema(FRAMEWORK, tool, 'schema', def.schema, { required: true });
  checkSchema(FRAMEWORK, tool, 'outputSchema', def.outputSchema, { required: false });
  const credentials = def.credentials ?? [];
  if (!Array.isArray(credentials) || credentials.some((c) => typeof c !== 'string' || !/^[A-Za-z][A-Za-z0-9_-]*$/.test(c))) {
    throw new CompatError(FRAMEWORK, tool, 'credentials', 'must be an array of names matching ^[A-Za-z][A-Za-z0-9_-]*$');
  }
  const execute = def.execute;
  if (typeof execute !== 'function') {
    throw new CompatError(FRAMEWORK, tool, 'execute', 'is missing or not a function');
  }
  const streaming = kindOf(execute) === 'generator';
  const hooks = def.hooks ?? {};
  if (hooks === null || typeof hooks !== 'object') {
    throw new CompatError(FRAMEWORK, tool, 'hooks', 'must be an object {beforeRun?, afterRun?, onError?}');
  }
  onlyKnown(FRAMEWORK, tool, 'hooks', hooks, HOOKS);
  for (const [k, fn] of Object.entries(hooks)) {
    if (typeof fn !== 'function') throw new CompatError(FRAMEWORK, tool, `hooks.${k}`, 'must be a function');
  }
  let retry = 0;
  if (def.errorHandling !== undefined) {
    const eh = def.errorHandling;
    if (eh === null || typeof eh !== 'object') {
      throw new CompatError(FRAMEWORK, tool, 'errorHandling', 'must be an object {retry: {attempts}}');
    }
    onlyKnown(FRAMEWORK, tool, 'errorHandling', eh, ['retry']);
    if (eh.retry !== undefined) {
      if (eh.retry === null || typeof eh.retry !== 'object') {
        throw new CompatError(FRAMEWORK, tool, 'errorHandling.retry', 'must be an object {attempts}');
      }
      onlyKnown(FRAMEWORK, tool, 'errorHandling.retry', eh.retry, ['attempts']);
      const a = eh.retry.attempts;
      if (!Number.isInteger(a) || a < 0 || a > 10) {
        throw new CompatError(FRAMEWORK, tool, 'errorHandling.retry.attempts', 'must be a whole number from 0 to 10');
      }
      retry = a;
    }
  }
  return Object.freeze({
    [COMPAT]: FRAMEWORK,
    name: tool,
    description: def.description ?? '',
    input: def.schema,
    output: def.outputSchema,
    credentials,
    hooks,
    retry,
    streaming,
    human: false,
    run: execute,
  });
}

/** bread's defineHumanTool: the call parks the run until a person answers. */
export function defineHumanTool(name, schema, ...rest) {
  checkName(name);
  if (rest.length > 0) {
    throw new CompatError(FRAMEWORK, name, 'defineHumanTool', 'takes (name, schema) only');
  }
  checkSchema(FRAMEWORK, name, 'schema', schema, { required: true });
  return Object.freeze({
    [COMPAT]: FRAMEWORK,
    name,
    description: 'Ask a person. The run waits until they answer; their answer is the result.',
    input: schema,
    output: undefined,
    credentials: [],
    hooks: {},
    retry: 0,
    streaming: false,
    human: true,
    run: undefined,
  });
}

function unsupportedProvider(which) {
  return () => {
    throw new CompatError(
      FRAMEWORK,
      undefined,
      which,
      "cannot be mapped: toolshed resolves credentials with the run's provider (the environment, or Vault configured in toolshed)",
    );
  };
}

/** bread's providers are toolshed's own: these throw with what to do. */
export const envProvider = unsupportedProvider('envProvider');
export const vaultProvider = unsupportedProvider('vaultProvider');
