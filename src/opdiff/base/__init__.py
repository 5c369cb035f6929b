"""The base layer: vocabulary every pipeline stage shares and that imports no stage.

Records, pair results, result/status/verdict names, errors, the version, document-file loading,
the output-directory rule, number formatting and the JSON rule for non-finite numbers.
"""
