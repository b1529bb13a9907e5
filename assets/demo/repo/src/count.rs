//! Counting the words of a text.

/// The number of words in `text`: the runs of characters between separators.
pub fn words(text: &str) -> usize {
    text.split(' ').filter(|word| !word.is_empty()).count()
}
